package budget

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// ErrExhausted is wrapped by every refused charge.
var ErrExhausted = errors.New("budget exhausted")

// ExhaustedError is a refused charge.
type ExhaustedError struct {
	Budget string           // the budget that ran out ("session s-1a2b", "daemon")
	Key    string           // the config key of its limit ("limits.session_budget_mib")
	Kind   string           // what asked ("overlay")
	Asked  int64            // bytes asked
	Used   int64            // bytes in use in Budget when asked
	Limit  int64            // Budget's limit in bytes
	Usage  map[string]int64 // Budget's usage by kind when asked
}

func (e *ExhaustedError) Error() string {
	kinds := make([]string, 0, len(e.Usage))
	for k := range e.Usage {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %s", k, Size(e.Usage[k])))
	}
	key := ""
	if e.Key != "" {
		key = "; raise " + e.Key
	}
	return fmt.Sprintf("%s budget exhausted: %s asked %s more with %s of %s in use (%s%s)",
		e.Budget, e.Kind, Size(e.Asked), Size(e.Used), Size(e.Limit), strings.Join(parts, ", "), key)
}

// Unwrap makes errors.Is(err, ErrExhausted) hold.
func (e *ExhaustedError) Unwrap() error { return ErrExhausted }

// Budget bounds the bytes held by one holder and, through its parent, by
// all of the parent's children together.
type Budget struct {
	name, key string
	limit     int64
	parent    *Budget

	mu      sync.Mutex
	used    map[string]int64 // by kind; only non-zero kinds
	total   int64
	closed  bool
	refused error // an Account's first refusal not yet taken
}

// New returns a budget of limit bytes (> 0) under parent (nil: none). name
// says whose it is in errors ("session s-1a2b"), key which setting sets
// the limit ("" when none does).
func New(name, key string, limit int64, parent *Budget) (*Budget, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("budget %s: limit %d bytes: want > 0", name, limit)
	}
	return &Budget{name: name, key: key, limit: limit, parent: parent, used: make(map[string]int64)}, nil
}

// Limit is the budget's limit in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used is the bytes in use, over all kinds.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Usage is the bytes in use by kind.
func (b *Budget) Usage() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.usageLocked()
}

func (b *Budget) usageLocked() map[string]int64 {
	u := make(map[string]int64, len(b.used))
	for k, v := range b.used {
		u[k] = v
	}
	return u
}

// Charge takes n bytes (>= 0) for kind from b and every ancestor, or
// nothing: past a limit it returns an *ExhaustedError naming the first
// budget, from b up, that ran out. A closed budget refuses every charge.
func (b *Budget) Charge(kind string, n int64) error {
	if n < 0 {
		return fmt.Errorf("budget %s: charge %d bytes for %s: want >= 0", b.name, n, kind)
	}
	if n == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("budget %s is closed: %s asked %s: %w", b.name, kind, Size(n), ErrExhausted)
	}
	if b.total+n > b.limit {
		return &ExhaustedError{Budget: b.name, Key: b.key, Kind: kind, Asked: n, Used: b.total, Limit: b.limit, Usage: b.usageLocked()}
	}
	if b.parent != nil {
		if err := b.parent.Charge(kind, n); err != nil {
			return err
		}
	}
	b.used[kind] += n
	b.total += n
	return nil
}

// Release gives back n bytes of kind to b and every ancestor; at most what
// kind holds is given back. Releasing into a closed budget does nothing
// (Close gave everything back already).
func (b *Budget) Release(kind string, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	n = min(n, b.used[kind])
	b.used[kind] -= n
	if b.used[kind] == 0 {
		delete(b.used, kind)
	}
	b.total -= n
	if b.parent != nil {
		b.parent.Release(kind, n)
	}
}

// Set makes kind's usage n bytes (>= 0), charging or releasing the
// difference; a refused growth leaves the usage as it was.
func (b *Budget) Set(kind string, n int64) error {
	if n < 0 {
		return fmt.Errorf("budget %s: set %s to %d bytes: want >= 0", b.name, kind, n)
	}
	b.mu.Lock()
	cur := b.used[kind]
	b.mu.Unlock()
	// Only the session that owns kind changes it, so cur stays true.
	if n > cur {
		return b.Charge(kind, n-cur)
	}
	b.Release(kind, cur-n)
	return nil
}

// Close gives back everything b holds to its ancestors; later charges are
// refused and releases ignored. Idempotent.
func (b *Budget) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	if b.parent != nil {
		for k, v := range b.used {
			b.parent.Release(k, v)
		}
	}
	clear(b.used)
	b.total = 0
}

// Refused returns the first refusal of one of b's Accounts since the last
// call, and forgets it; nil when there was none.
func (b *Budget) Refused() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.refused
	b.refused = nil
	return err
}

func (b *Budget) noteRefused(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refused == nil {
		b.refused = err
	}
}

// Account is b bound to one kind, keeping its refusals for Refused.
type Account struct {
	b    *Budget
	kind string
}

// Account returns b's account for kind.
func (b *Budget) Account(kind string) *Account { return &Account{b: b, kind: kind} }

// Charge is Budget.Charge for the account's kind; a refusal is also kept
// for Budget.Refused.
func (a *Account) Charge(n int64) error {
	err := a.b.Charge(a.kind, n)
	if err != nil {
		a.b.noteRefused(err)
	}
	return err
}

// Release is Budget.Release for the account's kind.
func (a *Account) Release(n int64) { a.b.Release(a.kind, n) }

// Size formats n bytes for people: "512 B", "4.0 KiB", "1.5 GiB".
func Size(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit || f <= -unit {
		f /= unit
		i++
		if i == 4 {
			break
		}
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}
