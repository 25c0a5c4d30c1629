package relay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// crashing is the machine double whose guest can die with a kernel
// report on its console.
type crashing struct {
	*sessiontest.Machine
	mu  sync.Mutex
	err error
}

func (c *crashing) crash(console string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = &vmm.GuestDiedError{Err: errors.New("qemu exited"), Console: console}
}

func (c *crashing) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return c.Machine.Call(ctx, req)
}

const panicConsole = "[    9.1] sysrq: Trigger a crash\n[    9.2] Kernel panic - not syncing: sysrq triggered crash\n"

var sync0 = &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}

// die crashes the chain's current guest and records its death.
func die(t *testing.T, c *Chain, machines *sessiontest.Machines) {
	t.Helper()
	machines.At(machines.Len() - 1).(*crashing).crash(panicConsole)
	_, err := c.Run().Call(c.Context(), "sync", sync0)
	d, ok := Of(c.Context(), err)
	if !ok || d.Verdict() != KernelCrash {
		t.Fatalf("call on a crashed guest: %v: want a kernel crash", err)
	}
	c.Lost(d)
}

// TestChain: a lost guest's session is replaced on the next Live (failed,
// its reason naming the death, an event on each side; ended before the
// fresh one is leased, so a daemon of one session has room for it), the
// chain's context lives across them, Live without a death keeps the
// session, and past MaxDeaths no session is leased.
func TestChain(t *testing.T) {
	m, machines := sessiontest.NewManager(t, t.TempDir(), session.Config{MaxSessions: 1}, func(vmm.Config) vmm.Machine {
		return &crashing{Machine: &sessiontest.Machine{}}
	})
	ctx := context.Background()
	c, err := Acquire(ctx, m, session.CreateOptions{Lanes: []string{"ext2"}}, "crash")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.MaxDeaths = 1
	first := c.Run()
	if run, replaced, err := c.Live(); run != first || replaced || err != nil {
		t.Fatalf("Live on a live guest = %v, %v, %v: want the same run", run, replaced, err)
	}
	die(t, c, machines)
	next, replaced, err := c.Live()
	if err != nil || !replaced || next == first || c.Deaths() != 1 || c.Dead() != nil {
		t.Fatalf("Live after a death = %v, %v, %v (deaths %d): want a fresh run", next, replaced, err, c.Deaths())
	}
	if _, err := next.Call(c.Context(), "sync", sync0); err != nil || c.Context().Err() != nil {
		t.Fatalf("the fresh run's call: %v, chain context %v: want both live", err, c.Context().Err())
	}
	in, err := m.Get(ctx, first.ID())
	if err != nil || in.State != session.StateFailed || !strings.Contains(in.Reason, "kernel-crash (Kernel panic - not syncing: sysrq triggered crash)") {
		t.Errorf("the dead session: %+v, %v: want failed, naming the report", in, err)
	}
	if ids := c.Sessions(); len(ids) != 2 || ids[0] != first.ID() || ids[1] != next.ID() {
		t.Errorf("sessions %v: want %s then %s", ids, first.ID(), next.ID())
	}
	wantEvent(t, m, first.ID(), "crash.guest.replaced", next.ID())
	wantEvent(t, m, next.ID(), "crash.guest.continues", first.ID())

	die(t, c, machines)
	if run, _, err := c.Live(); !errors.Is(err, ErrTooManyDeaths) || run != nil {
		t.Errorf("Live past MaxDeaths = %v, %v: want ErrTooManyDeaths", run, err)
	}
	if err := c.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if in, err := m.Get(ctx, next.ID()); err != nil || in.State != session.StateFailed {
		t.Errorf("the last, dead, session after Finish: %+v, %v: want failed", in, err)
	}
}

// TestChainDeleted: deleting the current session (a fresh one too) ends
// the chain's context, with the session's cause.
func TestChainDeleted(t *testing.T) {
	m, machines := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine {
		return &crashing{Machine: &sessiontest.Machine{}}
	})
	ctx := context.Background()
	c, err := Acquire(ctx, m, session.CreateOptions{Lanes: []string{"ext2"}}, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	die(t, c, machines)
	next, _, err := c.Live()
	if err != nil {
		t.Fatal(err)
	}
	if c.Context().Err() != nil {
		t.Fatalf("the replaced session's end ended the chain: %v", context.Cause(c.Context()))
	}
	deleted := make(chan error, 1)
	go func() { deleted <- m.Delete(ctx, next.ID()) }() // it waits for the run to end
	<-c.Context().Done()
	if cause := context.Cause(c.Context()); !errors.Is(cause, session.ErrRunDeleted) {
		t.Errorf("the chain's cause %v: want ErrRunDeleted", cause)
	}
	if err := c.Finish(context.Cause(c.Context())); !errors.Is(err, session.ErrRunDeleted) {
		t.Errorf("Finish = %v: want the cause", err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
}

func wantEvent(t *testing.T, m *session.Manager, id, kind, mention string) {
	t.Helper()
	evs, err := m.Events(context.Background(), id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == kind && strings.Contains(e.Detail, mention) {
			return
		}
	}
	t.Errorf("session %s: no %s event naming %s in %+v", id, kind, mention, evs)
}
