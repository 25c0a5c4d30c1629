package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/internal/budget"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// writer is a machine double whose Write ops write their size into its
// first disk, as a guest's filesystem would, and whose checkpoints hold
// cpBytes each (vmm.CheckpointMemory).
type writer struct {
	sessiontest.Machine
	disk    vmm.Disk
	at      int64
	cpBytes int64
}

func (w *writer) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if wr := req.GetWrite(); wr != nil {
		if _, err := w.disk.Device.WriteAt(make([]byte, wr.GetSize()), w.at); err != nil {
			// The guest sees an I/O error, as through NBD.
			return &agentv1.Response{Id: req.GetId(), Errno: 5, Error: err.Error()}, nil
		}
		w.at += wr.GetSize()
	}
	return w.Machine.Call(ctx, req)
}

func (w *writer) CheckpointBytes() int64 { return w.cpBytes * int64(len(w.Checkpoints())) }

func writeOp(size int64) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: "f", Size: size}}}
}

func newWriterManager(t *testing.T, cfg session.Config, cpBytes int64) (*session.Manager, *sessiontest.Machines) {
	return sessiontest.NewManager(t, t.TempDir(), cfg, func(c vmm.Config) vmm.Machine {
		return &writer{disk: c.Disks[0], cpBytes: cpBytes}
	})
}

func create(t *testing.T, m *session.Manager) string {
	t.Helper()
	in, err := m.Create(context.Background(), session.CreateOptions{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	return in.ID
}

// TestBudgetOverlayWrites: a session whose guest writes past its budget
// fails alone, with ErrExhausted naming what ran out; its bytes go back.
func TestBudgetOverlayWrites(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name             string
		session, daemon  int64
		first, second    int64 // bytes written by a bystander, then by the session under test
		wantBudget, want string
	}{
		{"session budget", 2 * mib, 64 * mib, mib, 3 * mib, "session s-", session.SessionBudgetKey},
		{"daemon budget", 4 * mib, 5 * mib, 3 * mib, 3 * mib, "daemon budget", session.DaemonBudgetKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m, _ := newWriterManager(t, session.Config{SessionBudget: tc.session, DaemonBudget: tc.daemon}, 0)
			base := m.Stats().BudgetUsed // the mkfs'd lanes' first writes, if any
			bystander, victim := create(t, m), create(t, m)
			if _, err := m.Apply(ctx, bystander, writeOp(tc.first)); err != nil {
				t.Fatalf("bystander's write within its budget: %v", err)
			}
			_, err := m.Apply(ctx, victim, writeOp(tc.second))
			if !errors.Is(err, errkind.ErrExhausted) || !errors.Is(err, budget.ErrExhausted) {
				t.Fatalf("write past the budget: %v, want ErrExhausted", err)
			}
			for _, w := range []string{tc.wantBudget, "overlay", tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			in, gerr := m.Get(ctx, victim)
			if gerr != nil || in.State != session.StateFailed || !strings.Contains(in.Reason, "budget exhausted") {
				t.Errorf("victim after the refusal: %+v %v, want failed naming the budget", in, gerr)
			}
			if _, err := m.Apply(ctx, bystander, writeOp(4096)); err != nil {
				t.Errorf("bystander after the victim failed: %v", err)
			}
			if err := m.Delete(ctx, bystander); err != nil {
				t.Fatal(err)
			}
			if got := m.Stats().BudgetUsed; got != base {
				t.Errorf("daemon budget holds %d bytes after both sessions ended, want %d", got, base)
			}
		})
	}
}

// TestBudgetForkRefused: a fork whose checkpoint memory does not fit is
// refused and undone; the session keeps running.
func TestBudgetForkRefused(t *testing.T) {
	ctx := context.Background()
	m, ms := newWriterManager(t, session.Config{SessionBudget: 3 << 20, DaemonBudget: 64 << 20}, 2<<20)
	id := create(t, m)
	if _, err := m.Fork(ctx, id, "one", ""); err != nil {
		t.Fatalf("first fork (2 MiB of 3): %v", err)
	}
	_, err := m.Fork(ctx, id, "two", "")
	if !errors.Is(err, errkind.ErrExhausted) || !strings.Contains(err.Error(), "checkpoint RAM") {
		t.Fatalf("second fork (4 MiB of 3): %v, want ErrExhausted naming checkpoint RAM", err)
	}
	if got := len(ms.At(0).Checkpoints()); got != 1 {
		t.Errorf("machine holds %d checkpoints after the refused fork, want 1", got)
	}
	in, err := m.Get(ctx, id)
	if err != nil || in.State != session.StateRunning || in.Depth != 1 {
		t.Errorf("after a refused fork: %+v %v, want running at depth 1", in, err)
	}
	if got := m.Stats().BudgetUsed; got < 2<<20 || got >= 3<<20 {
		t.Errorf("daemon budget holds %d, want the one checkpoint's 2 MiB (and the lanes' writes)", got)
	}
}

// TestBudgetCreateRefused: a daemon with less than a MiB of its budget
// left refuses new sessions with ErrExhausted naming its key.
func TestBudgetCreateRefused(t *testing.T) {
	ctx := context.Background()
	m, _ := newWriterManager(t, session.Config{SessionBudget: 4 << 20, DaemonBudget: 2 << 20}, 0)
	id := create(t, m)
	// 1.25 MiB of sectors: less than a MiB left.
	if _, err := m.Apply(ctx, id, writeOp((5<<18)/overlay.SectorCost*overlay.SectorSize)); err != nil {
		t.Fatal(err)
	}
	_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
	if !errors.Is(err, errkind.ErrExhausted) || !strings.Contains(err.Error(), session.DaemonBudgetKey) {
		t.Fatalf("create with the daemon budget spent: %v", err)
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}}); err != nil {
		t.Fatalf("create once the budget came back: %v", err)
	}
}

func TestBudgetConfig(t *testing.T) {
	for _, cfg := range []session.Config{{SessionBudget: -1}, {DaemonBudget: -1}} {
		_, err := session.Open(context.Background(), session.Config{StateDir: t.TempDir(), MakeBase: baseimage.Make, SessionBudget: cfg.SessionBudget, DaemonBudget: cfg.DaemonBudget})
		if err == nil || !strings.Contains(err.Error(), "Budget") {
			t.Errorf("budgets %d/%d: %v, want an error naming the budget", cfg.SessionBudget, cfg.DaemonBudget, err)
		}
	}
	d, err := session.DefaultDaemonBudget()
	if err != nil || d < 256<<20 {
		t.Errorf("DefaultDaemonBudget = %d, %v", d, err)
	}
}

// TestFree: the room Create has left, by session slots and guest memory.
func TestFree(t *testing.T) {
	m, _ := newWriterManager(t, session.Config{MaxSessions: 3, MaxMemoryMiB: 512}, 0)
	for _, tc := range []struct {
		mib, want int
	}{{0, 3}, {128, 3}, {256, 2}, {1024, 0}} {
		if got := m.Free(tc.mib); got != tc.want {
			t.Errorf("Free(%d) = %d, want %d", tc.mib, got, tc.want)
		}
	}
	create(t, m)
	if got := m.Free(128); got != 2 {
		t.Errorf("Free(128) with one session = %d, want 2", got)
	}
	if got := m.Free(192); got != 2 {
		t.Errorf("Free(192) with 384 MiB left = %d, want 2", got)
	}
}
