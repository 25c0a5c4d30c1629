package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestBudgetRealQEMU: a real guest writes 24 MiB into a lane of a session
// whose budget is 8 MiB. The overlay refuses the sectors past it, the
// guest's filesystem sees I/O errors, and the call that observes the
// refusal fails with ErrExhausted naming the overlay; the session fails
// alone (the other one answers), and the daemon budget gets its bytes
// back. Then a fork whose RAM shadow does not fit is refused and undone.
// Real checks that no QEMU is left.
func TestBudgetRealQEMU(t *testing.T) {
	m := sessiontest.Real(t, session.Config{SessionBudget: 8 << 20, DaemonBudget: 256 << 20})
	ctx := context.Background()
	other, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, Backend: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	victim, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext4:size=64"}, Backend: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	before := m.Stats().BudgetUsed
	var failed error
	for i := 0; i < 6 && failed == nil; i++ {
		// 4 MiB of 0x5a per file, then sync: the writeback reaches the overlay.
		ops := []*agentv1.Request{
			{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: "f" + string(rune('0'+i)), Flags: 0o100, Size: 4 << 20, Fill: 0x5a}}},
			{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}},
		}
		for _, op := range ops {
			res, err := m.Apply(ctx, victim.ID, op)
			if err != nil {
				failed = err
				break
			}
			t.Logf("op %d: %+v", i, res)
		}
	}
	if !errors.Is(failed, errkind.ErrExhausted) || !strings.Contains(failed.Error(), "overlay") || !strings.Contains(failed.Error(), session.SessionBudgetKey) {
		t.Fatalf("24 MiB into an 8 MiB budget: %v, want ErrExhausted naming the overlay and %s", failed, session.SessionBudgetKey)
	}
	t.Logf("refused: %v", failed)
	in, err := m.Get(ctx, victim.ID)
	if err != nil || in.State != session.StateFailed {
		t.Errorf("victim: %+v %v, want failed", in, err)
	}
	if _, _, err := m.Stat(ctx, other.ID, "ext2", "", false); err != nil {
		t.Errorf("the other session after the victim failed: %v", err)
	}
	if used := m.Stats().BudgetUsed; used >= before {
		t.Errorf("daemon budget %d bytes after the victim failed, %d before: nothing given back", used, before)
	}

	// A fork on the other session needs a RAM shadow (128 MiB, devices
	// restore) that its 8 MiB cannot hold: refused, undone, still running.
	_, err = m.Fork(ctx, other.ID, "", "")
	if !errors.Is(err, errkind.ErrExhausted) || !strings.Contains(err.Error(), "checkpoint RAM") {
		t.Fatalf("fork past the budget: %v, want ErrExhausted naming checkpoint RAM", err)
	}
	t.Logf("fork refused: %v", err)
	if in, err := m.Get(ctx, other.ID); err != nil || in.State != session.StateRunning || in.Depth != 0 {
		t.Errorf("after the refused fork: %+v %v, want running at depth 0", in, err)
	}
	if _, err := m.Apply(ctx, other.ID, &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d", Mode: 0o755}}}); err != nil {
		t.Errorf("apply after the refused fork: %v", err)
	}
}
