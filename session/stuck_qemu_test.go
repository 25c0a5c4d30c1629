package session_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
)

// TestStuckGuestRealQEMU stops a real session's QEMU with SIGSTOP: a Stat
// on it ends by CallTimeout and marks it unresponsive, while List answers
// at once; Delete then ends it within a bound and leaves no QEMU behind
// (Real checks). (A timed-out call breaks the agent client, so on QEMU
// the next call would fail the session; Delete under a call in flight is
// TestStuckGuestDelete's, on the double.)
func TestStuckGuestRealQEMU(t *testing.T) {
	const callTimeout = 3 * time.Second
	var mu sync.Mutex
	var machines []*qemu.Machine
	m := sessiontest.Real(t, session.Config{CallTimeout: callTimeout, MaxSessions: 1,
		Start: func(ctx context.Context, c vmm.Config) (vmm.Machine, error) {
			q, err := qemu.Start(ctx, c)
			if err == nil {
				mu.Lock()
				machines = append(machines, q)
				mu.Unlock()
			}
			return q, err
		}})
	ctx := context.Background()
	in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, Backend: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	pid := machines[0].Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP qemu %d: %v", pid, err)
	}
	t.Cleanup(func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("SIGCONT qemu %d: %v", pid, err)
		}
	})

	errc := make(chan error, 1)
	go func() { _, _, err := m.Stat(ctx, in.ID, "ext2", "", false); errc <- err }()
	time.Sleep(callTimeout / 3)
	if err := within(t, prompt, "List while the guest is stopped", func(ctx context.Context) error {
		_, err := m.List(ctx, false)
		return err
	}); err != nil {
		t.Error(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, session.ErrUnresponsive) {
			t.Errorf("Stat of the stopped guest: %v, want ErrUnresponsive", err)
		}
	case <-time.After(3 * callTimeout):
		t.Fatal("Stat of the stopped guest did not end by CallTimeout")
	}
	if got, err := m.Get(ctx, in.ID); err != nil || got.State != session.StateUnresponsive {
		t.Errorf("Get: %+v, %v: want unresponsive", got, err)
	}

	t0 := time.Now()
	if err := within(t, 10*time.Second, "Delete of the stopped guest", func(ctx context.Context) error {
		return m.Delete(ctx, in.ID)
	}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	t.Logf("Delete of the stopped guest took %s", time.Since(t0).Round(time.Millisecond))
	if got, err := m.Get(ctx, in.ID); err != nil || got.State != session.StateEnded || got.Reason != "deleted" {
		t.Errorf("after Delete: %+v, %v: want ended, deleted", got, err)
	}
}
