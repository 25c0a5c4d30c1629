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

// TestRunLease checks a run's lease on the machine double: the session is
// busy while the run lasts, its calls go through, a gone guest wraps
// ErrGuestGone, the run ends once (End, then Close is a no-op; Close alone
// ends it), and after its end every call is ErrState.
func TestRunLease(t *testing.T) {
	m, machines := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	ctx := context.Background()
	sync := &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}

	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: []string{"ext2", "ext4"}}, "profile")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(run.Lanes(), ","); got != "ext2,ext4" || run.Backend() != "qemu" {
		t.Errorf("lanes %q, backend %q: want ext2,ext4 on qemu", got, run.Backend())
	}
	if _, err := m.Apply(ctx, run.ID(), sync); !errors.Is(err, errkind.ErrState) || !strings.Contains(err.Error(), "busy with a profile run") {
		t.Errorf("Apply during the run: %v, want ErrState naming the run", err)
	}
	res, err := run.Apply(ctx, &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d", Mode: 0o755}}})
	if err != nil || len(res) != 2 || res[0].Lane != "ext2" || res[1].Lane != "ext4" {
		t.Errorf("run.Apply = %v, %v: want one result per lane", res, err)
	}
	if _, err := run.Apply(ctx, &agentv1.Request{}); !errors.Is(err, errkind.ErrInvalid) {
		t.Errorf("run.Apply(no op) = %v, want ErrInvalid", err)
	}
	if err := run.End(session.StateEnded, "profile finished"); err != nil {
		t.Fatal(err)
	}
	run.Close() // a no-op after End
	in, err := m.Get(ctx, run.ID())
	if err != nil || in.State != session.StateEnded || in.Reason != "profile finished" {
		t.Errorf("after End: %+v, %v: want ended, profile finished", in, err)
	}
	if _, err := run.Call(ctx, "sync", sync); !errors.Is(err, errkind.ErrState) {
		t.Errorf("Call after End = %v, want ErrState", err)
	}

	// A run its runner leaves without ending: Close ends it.
	run, err = m.Acquire(ctx, session.CreateOptions{Lanes: []string{"ext2"}}, "explore")
	if err != nil {
		t.Fatal(err)
	}
	machines.At(1).(*sessiontest.Machine).Kill()
	if _, err := run.Checkpoint(ctx, "root checkpoint"); err != nil {
		t.Errorf("Checkpoint = %v", err) // the double checkpoints without a guest
	}
	if _, err := run.Call(ctx, "sync", sync); !errors.Is(err, session.ErrGuestGone) || !strings.HasPrefix(err.Error(), "sync: ") {
		t.Errorf("Call on a dead guest = %v, want ErrGuestGone prefixed with what", err)
	}
	run.Close()
	if in, err := m.Get(ctx, run.ID()); err != nil || in.State != session.StateEnded || in.Reason != "explore failed: ended early" {
		t.Errorf("after Close: %+v, %v: want ended, explore failed: ended early", in, err)
	}
}
