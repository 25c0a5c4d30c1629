package live

import (
	"errors"
	"sync"
	"time"
	"unicode/utf8"
)

// Bounds.
const (
	// MaxSessions bounds the sessions a Hub keeps; past it the one that
	// ended longest ago is forgotten (a new one is ignored when none has
	// ended).
	MaxSessions = 1024
	// MaxSubscribers bounds the open subscriptions, all sessions together.
	MaxSubscribers = 64
	// MaxText bounds the bytes of an update's Line and of a run's
	// Options; Kind and Part are cut at MaxName.
	MaxText = 1024
	// MaxName bounds the bytes of a run's Kind and an update's Part.
	MaxName = 64
)

// Errors of Subscribe.
var (
	// ErrNotRunning: no run of the session is going on here.
	ErrNotRunning = errors.New("live: no run of that session is going on")
	// ErrTooMany: MaxSubscribers subscriptions are open.
	ErrTooMany = errors.New("live: too many subscribers")
)

// Run is what a Feed's run is: its kind ("explore", "check", "crash"),
// its options as the daemon received them, when it started.
type Run struct {
	Kind    string
	Options string
	Started time.Time
}

// Update is a session's progress. Its JSON is what an event carries.
type Update struct {
	// Seq counts the session's updates from 1.
	Seq int64 `json:"seq"`
	// Kind is the run's kind; Part the check part it belongs to ("" for none).
	Kind string `json:"kind"`
	Part string `json:"part,omitempty"`
	// States counts what the run did (ops applied, crash states checked);
	// Unique the distinct states; Depth the deepest reached.
	States int64 `json:"states"`
	Unique int64 `json:"unique"`
	Depth  int64 `json:"depth"`
	// Findings counts the findings so far.
	Findings int64 `json:"findings"`
	// Rate is States per second; ElapsedS the seconds since the run started.
	Rate     float64 `json:"rate"`
	ElapsedS float64 `json:"elapsed_s"`
	// Line says the update in words.
	Line string `json:"line"`
	// Done says the run ended: the session's last update.
	Done bool `json:"done"`
}

// entry is one session's run, last update and subscribers.
type entry struct {
	run   Run
	last  Update
	ended bool
	subs  map[*Sub]struct{}
}

// Hub keeps the sessions' runs and updates. The zero value is not usable:
// NewHub.
type Hub struct {
	mu      sync.Mutex
	entries map[string]*entry
	ended   []string // ended sessions, the longest ago first
	nsubs   int
	closed  bool
}

// NewHub returns an empty Hub.
func NewHub() *Hub { return &Hub{entries: make(map[string]*entry)} }

// Sub is one subscription to a session's updates.
type Sub struct {
	h       *Hub
	session string
	c       chan Update
	closed  bool // c is closed; h.mu guards it
}

// C delivers the session's updates, the newest only when the reader is
// behind; it is closed after the update that says Done, or when the
// subscription ends otherwise.
func (s *Sub) C() <-chan Update { return s.c }

// Close ends the subscription. It is idempotent.
func (s *Sub) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if e := s.h.entries[s.session]; e != nil {
		delete(e.subs, s)
	}
	s.h.drop(s)
}

// drop closes s's channel once and counts it out. h.mu is held.
func (h *Hub) drop(s *Sub) {
	if s.closed {
		return
	}
	s.closed = true
	close(s.c)
	h.nsubs--
}

// deliver gives u to s, replacing an update s has not read. h.mu is held
// (the only sender).
func deliver(s *Sub, u Update) {
	select {
	case s.c <- u:
		return
	default:
	}
	select {
	case <-s.c:
	default:
	}
	select {
	case s.c <- u:
	default:
	}
}

// Lookup returns session's run and last update; found says the Hub knows
// the session, running whether its run is still going on.
func (h *Hub) Lookup(session string) (r Run, last Update, found, running bool) {
	if h == nil {
		return Run{}, Update{}, false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[session]
	if e == nil {
		return Run{}, Update{}, false, false
	}
	return e.run, e.last, true, !e.ended
}

// Subscribe subscribes to the updates of session's run that follow
// (ErrNotRunning when none is going on, ErrTooMany past MaxSubscribers).
func (h *Hub) Subscribe(session string) (*Sub, error) {
	if h == nil {
		return nil, ErrNotRunning
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[session]
	if h.closed || e == nil || e.ended {
		return nil, ErrNotRunning
	}
	if h.nsubs >= MaxSubscribers {
		return nil, ErrTooMany
	}
	s := &Sub{h: h, session: session, c: make(chan Update, 1)}
	e.subs[s] = struct{}{}
	h.nsubs++
	return s, nil
}

// Close ends every session's run and subscription (the daemon stops);
// later subscriptions are refused.
func (h *Hub) Close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for id, e := range h.entries {
		if !e.ended {
			h.end(id, e)
		}
	}
}

// begin registers session as run's, unless it is already. h.mu is held.
func (h *Hub) begin(session string, r Run) *entry {
	if e := h.entries[session]; e != nil {
		if e.ended { // a session's run is over for good; it has no other
			return nil
		}
		return e
	}
	if h.closed {
		return nil
	}
	if len(h.entries) >= MaxSessions {
		if len(h.ended) == 0 {
			return nil
		}
		delete(h.entries, h.ended[0])
		h.ended = h.ended[1:]
	}
	e := &entry{run: r, subs: make(map[*Sub]struct{})}
	h.entries[session] = e
	return e
}

// publish sets session's last update and hands it to its subscribers.
func (h *Hub) publish(session string, r Run, u Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.begin(session, r)
	if e == nil {
		return
	}
	u.Seq, u.Kind, u.Part, u.Line, u.Done = e.last.Seq+1, e.run.Kind, clip(u.Part, MaxName), clip(u.Line, MaxText), false
	e.last = u
	for s := range e.subs {
		deliver(s, u)
	}
}

// end marks session's run ended: its subscribers get the last update
// with Done set, then their channels close. h.mu is held.
func (h *Hub) end(session string, e *entry) {
	e.ended = true
	e.last.Done = true
	e.last.Seq++
	for s := range e.subs {
		deliver(s, e.last)
		h.drop(s)
	}
	e.subs = nil
	h.ended = append(h.ended, session)
}

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
