package budget

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func mustNew(t *testing.T, name string, limit int64, parent *Budget) *Budget {
	t.Helper()
	b, err := New(name, "limits."+name, limit, parent)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestChargeWithinAndPast(t *testing.T) {
	for _, tc := range []struct {
		name          string
		daemon, sess  int64
		charges       []int64
		wantRefusedAt int // index of the first refused charge, -1 none
		wantBudget    string
	}{
		{"fits", 100, 50, []int64{10, 20, 20}, -1, ""},
		{"session runs out", 100, 50, []int64{30, 30}, 1, "session"},
		{"daemon runs out", 40, 100, []int64{30, 30}, 1, "daemon"},
		{"exactly the limit", 100, 50, []int64{50, 1}, 1, "session"},
		{"zero is free", 1, 1, []int64{1, 0}, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, "daemon", tc.daemon, nil)
			s := mustNew(t, "session", tc.sess, d)
			refused := -1
			for i, n := range tc.charges {
				err := s.Charge("overlay", n)
				if err == nil {
					continue
				}
				refused = i
				var ex *ExhaustedError
				if !errors.As(err, &ex) || !errors.Is(err, ErrExhausted) {
					t.Fatalf("charge %d: %v: not an ExhaustedError", i, err)
				}
				if ex.Budget != tc.wantBudget || ex.Kind != "overlay" || ex.Asked != n {
					t.Errorf("refusal names %+v, want budget %s kind overlay asked %d", ex, tc.wantBudget, n)
				}
				if !strings.Contains(err.Error(), "limits."+tc.wantBudget) {
					t.Errorf("error %q does not name the key", err)
				}
				break
			}
			if refused != tc.wantRefusedAt {
				t.Fatalf("refused at %d, want %d", refused, tc.wantRefusedAt)
			}
			if s.Used() != d.Used() {
				t.Errorf("session holds %d, daemon %d: a refused charge left bytes behind", s.Used(), d.Used())
			}
		})
	}
}

func TestReleaseAndClose(t *testing.T) {
	d := mustNew(t, "daemon", 100, nil)
	a := mustNew(t, "a", 100, d)
	b := mustNew(t, "b", 100, d)
	for _, step := range []struct {
		err error
	}{
		{a.Charge("overlay", 40)},
		{a.Charge("kept content", 10)},
		{b.Charge("overlay", 30)},
	} {
		if step.err != nil {
			t.Fatal(step.err)
		}
	}
	if err := b.Charge("overlay", 30); err == nil {
		t.Fatal("daemon over its limit: charge accepted")
	}
	a.Release("overlay", 15)
	a.Release("overlay", 1000) // more than it holds: only what it holds
	if got := a.Usage(); got["overlay"] != 0 || got["kept content"] != 10 || len(got) != 1 {
		t.Errorf("a's usage %v", got)
	}
	if got := d.Used(); got != 40 {
		t.Errorf("daemon holds %d, want 40", got)
	}
	a.Close()
	a.Close()
	if got := d.Used(); got != 30 {
		t.Errorf("daemon holds %d after a closed, want 30", got)
	}
	if err := a.Charge("overlay", 1); !errors.Is(err, ErrExhausted) {
		t.Errorf("charge into a closed budget: %v", err)
	}
	a.Release("overlay", 5)
	if got := d.Used(); got != 30 {
		t.Errorf("release into a closed budget changed the daemon: %d", got)
	}
}

func TestSet(t *testing.T) {
	s := mustNew(t, "session", 100, nil)
	for _, tc := range []struct {
		set     int64
		wantErr bool
		want    int64
	}{{60, false, 60}, {90, false, 90}, {101, true, 90}, {10, false, 10}, {0, false, 0}, {-1, true, 0}} {
		err := s.Set("checkpoint RAM", tc.set)
		if (err != nil) != tc.wantErr {
			t.Errorf("set %d: err %v", tc.set, err)
		}
		if got := s.Used(); got != tc.want {
			t.Errorf("set %d: used %d, want %d", tc.set, got, tc.want)
		}
	}
}

func TestAccountKeepsRefusal(t *testing.T) {
	s := mustNew(t, "session", 10, nil)
	acct := s.Account("overlay")
	if err := acct.Charge(8); err != nil {
		t.Fatal(err)
	}
	if err := s.Refused(); err != nil {
		t.Fatalf("refused %v before any refusal", err)
	}
	// A direct Charge's refusal goes to its caller only.
	if err := s.Charge("kept content", 8); err == nil {
		t.Fatal("charge past the limit accepted")
	}
	if err := s.Refused(); err != nil {
		t.Fatalf("a direct charge's refusal was kept: %v", err)
	}
	first := acct.Charge(5)
	second := acct.Charge(6)
	if first == nil || second == nil {
		t.Fatal("charges past the limit accepted")
	}
	if got := s.Refused(); got != first {
		t.Errorf("Refused = %v, want the first refusal %v", got, first)
	}
	if got := s.Refused(); got != nil {
		t.Errorf("Refused again = %v, want nil", got)
	}
	acct.Release(8)
	if s.Used() != 0 {
		t.Errorf("used %d after release", s.Used())
	}
}

func TestConcurrentCharges(t *testing.T) {
	d := mustNew(t, "daemon", 1000, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := int64(0)
	for i := range 8 {
		s := mustNew(t, "s", 1000, d)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if s.Charge("overlay", int64(i+1)) == nil {
					mu.Lock()
					accepted += int64(i + 1)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if got := d.Used(); got != accepted || got > 1000 {
		t.Errorf("daemon holds %d, accepted %d (limit 1000)", got, accepted)
	}
}

func TestNewRefusesBadLimit(t *testing.T) {
	for _, n := range []int64{0, -1} {
		if _, err := New("s", "", n, nil); err == nil {
			t.Errorf("limit %d accepted", n)
		}
	}
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {544, "544 B"}, {1536, "1.5 KiB"}, {1 << 30, "1.0 GiB"}, {5 << 40, "5.0 TiB"}, {1 << 62, "4096.0 PiB"}} {
		if got := Size(tc.n); got != tc.want {
			t.Errorf("Size(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
