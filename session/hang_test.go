package session_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// prompt is how long a view or a call on another session may take while
// one guest is stuck.
const prompt = time.Second

// within runs f and fails the test unless it returns within d; it returns
// f's error (or a timeout error, leaving f running).
func within(t *testing.T, d time.Duration, what string, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d + 100*time.Millisecond):
		t.Errorf("%s did not return within %s", what, d)
		return fmt.Errorf("%s: timed out", what)
	}
}

// hangManager opens a Manager whose machines are Hangs, with cfg.
func hangManager(t *testing.T, cfg session.Config) (*session.Manager, *sessiontest.Machines) {
	t.Helper()
	return sessiontest.NewManager(t, t.TempDir(), cfg, func(vmm.Config) vmm.Machine { return sessiontest.NewHang() })
}

// stuckStat stops session i's machine in mode and starts a Stat on it with
// ctx; it returns once the Stat is blocked in the machine, and the channel
// its error will come on.
func stuckStat(t *testing.T, m *session.Manager, ms *sessiontest.Machines, i int, id string, mode sessiontest.HangMode, ctx context.Context) <-chan error {
	t.Helper()
	h := ms.At(i).(*sessiontest.Hang)
	h.Stop(mode)
	t.Cleanup(h.Cont) // never leave a goroutine blocked past the test
	errc := make(chan error, 1)
	go func() {
		_, _, err := m.Stat(ctx, id, "ext2", "f", false)
		errc <- err
	}()
	select {
	case <-h.Blocked():
	case <-time.After(10 * time.Second):
		t.Fatal("the Stat on the stopped guest never reached the machine")
	}
	return errc
}

// TestStuckGuestViews: while one session's guest is stopped in the middle
// of a Stat, Get, List and Checkpoints of it and of another session, and a
// Stat of the other session, all answer promptly.
func TestStuckGuestViews(t *testing.T) {
	m, ms := hangManager(t, session.Config{})
	ctx := context.Background()
	var ids []string
	for range 2 {
		in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Fork(ctx, in.ID, "start", ""); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	stuck, other := ids[0], ids[1]
	errc := stuckStat(t, m, ms, 0, stuck, sessiontest.UntilDeadline, ctx)

	for _, id := range ids {
		if err := within(t, prompt, "Get "+id, func(ctx context.Context) error {
			in, err := m.Get(ctx, id)
			if err == nil && (in.ID != id || in.Depth != 1) {
				err = fmt.Errorf("got %+v", in)
			}
			return err
		}); err != nil {
			t.Errorf("Get %s: %v", id, err)
		}
		if err := within(t, prompt, "Checkpoints "+id, func(ctx context.Context) error {
			cps, err := m.Checkpoints(ctx, id, false)
			if err == nil && (len(cps) != 1 || cps[0].Name != "start") {
				err = fmt.Errorf("got %d checkpoints", len(cps))
			}
			return err
		}); err != nil {
			t.Errorf("Checkpoints %s: %v", id, err)
		}
	}
	if err := within(t, prompt, "List", func(ctx context.Context) error {
		l, err := m.List(ctx, false)
		if err == nil && len(l) != 2 {
			err = fmt.Errorf("%d sessions, want 2", len(l))
		}
		return err
	}); err != nil {
		t.Errorf("List: %v", err)
	}
	if err := within(t, prompt, "Stat of the other session", func(ctx context.Context) error {
		_, _, err := m.Stat(ctx, other, "ext2", "f", false)
		return err
	}); err != nil {
		t.Errorf("Stat %s: %v", other, err)
	}
	select {
	case err := <-errc:
		t.Errorf("the Stat on the stopped guest returned (%v) while it was stopped", err)
	default:
	}
}

// TestStuckGuestDelete: Delete of a session whose guest is stuck in a call
// returns within a bound, however the machine hangs, ends the session and
// frees its slot (MaxSessions 1: the next Create succeeds); the stuck call
// returns an error once the machine is killed.
func TestStuckGuestDelete(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode sessiontest.HangMode
	}{
		{"until-deadline", sessiontest.UntilDeadline},
		{"until-kill", sessiontest.UntilKill},
		{"forever", sessiontest.Forever},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ms := hangManager(t, session.Config{MaxSessions: 1})
			ctx := context.Background()
			in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
			if err != nil {
				t.Fatal(err)
			}
			errc := stuckStat(t, m, ms, 0, in.ID, tc.mode, ctx)
			if err := within(t, 10*time.Second, "Delete of the stuck session", func(ctx context.Context) error {
				return m.Delete(ctx, in.ID)
			}); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if got, err := m.Get(ctx, in.ID); err != nil || got.State != session.StateEnded {
				t.Errorf("after Delete: %+v, %v: want ended", got, err)
			}
			if err := within(t, prompt, "Create after the Delete", func(ctx context.Context) error {
				_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
				return err
			}); err != nil {
				t.Errorf("Create after Delete (slot freed?): %v", err)
			}
			if tc.mode == sessiontest.Forever {
				return // the call is given up on; Cleanup lets it go
			}
			select {
			case err := <-errc:
				if err == nil {
					t.Error("the stuck Stat succeeded after its machine was killed")
				}
			case <-time.After(10 * time.Second):
				t.Error("the stuck Stat did not return after Delete killed its machine")
			}
		})
	}
}

// TestStuckGuestDeadline: a call on a silent guest ends by its deadline.
// The caller's own deadline ends it as the caller's (DeadlineExceeded, the
// session still running); Config.CallTimeout ends one with no earlier
// deadline, wrapping ErrUnresponsive, and marks the session unresponsive
// (in Get and List, with an event). An answer makes it running again; a
// Delete of an unresponsive session ends it at once.
func TestStuckGuestDeadline(t *testing.T) {
	const callTimeout = 300 * time.Millisecond
	m, ms := hangManager(t, session.Config{CallTimeout: callTimeout})
	ctx := context.Background()
	in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	id, h := in.ID, ms.At(0).(*sessiontest.Hang)
	h.Stop(sessiontest.UntilDeadline)
	t.Cleanup(h.Cont)
	state := func() session.State {
		t.Helper()
		got, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}

	err = within(t, callTimeout, "Stat under the caller's deadline", func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, callTimeout/3)
		defer cancel()
		_, _, err := m.Stat(cctx, id, "ext2", "f", false)
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, session.ErrUnresponsive) || state() != session.StateRunning {
		t.Errorf("Stat past the caller's deadline: %v, state %s: want DeadlineExceeded, still running", err, state())
	}

	err = within(t, 3*callTimeout, "Stat under CallTimeout", func(ctx context.Context) error {
		_, _, err := m.Stat(context.Background(), id, "ext2", "f", false)
		return err
	})
	if !errors.Is(err, session.ErrUnresponsive) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stat past CallTimeout: %v, want ErrUnresponsive and DeadlineExceeded", err)
	}
	if got, err := m.Get(ctx, id); err != nil || got.State != session.StateUnresponsive || !strings.Contains(got.Reason, "stat") {
		t.Errorf("Get after the silent call: %+v, %v: want unresponsive, reason naming the stat", got, err)
	}
	if l, err := m.List(ctx, false); err != nil || len(l) != 1 || l[0].State != session.StateUnresponsive {
		t.Errorf("List after the silent call: %v, %v: want the session, unresponsive", l, err)
	}
	evs, err := m.Events(ctx, id, 0, 0)
	if err != nil || !slices.ContainsFunc(evs, func(e session.Event) bool { return e.Kind == "session.unresponsive" }) {
		t.Errorf("events %v, %v: want a session.unresponsive event", evs, err)
	}

	h.Cont()
	if _, _, err := m.Stat(ctx, id, "ext2", "f", false); err != nil || state() != session.StateRunning {
		t.Errorf("Stat after SIGCONT: %v, state %s: want an answer, running again", err, state())
	}

	h.Stop(sessiontest.UntilDeadline)
	if _, err := m.Fork(ctx, id, "", ""); !errors.Is(err, session.ErrUnresponsive) || state() != session.StateUnresponsive {
		t.Errorf("Fork on the stopped guest: %v, state %s: want ErrUnresponsive, unresponsive", err, state())
	}
	if err := within(t, prompt, "Delete of the unresponsive session", func(ctx context.Context) error {
		return m.Delete(ctx, id)
	}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := state(); got != session.StateEnded {
		t.Errorf("after Delete: %s, want ended", got)
	}
}
