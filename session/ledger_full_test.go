package session_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/internal/scratch/scratchtest"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestLedgerFull: with the state dir's file system full, a write to the
// ledger fails ErrExhausted naming the ledger file and ENOSPC; a Fork whose
// checkpoint cannot be recorded fails whole (no checkpoint left on the
// machine or listed), an op whose event cannot be recorded still
// answers, and once there is room again the next Fork is c-1 and Delete
// records the end. Before, the error was a bare "database or disk is
// full" (INTERNAL) and the failed Fork's checkpoint stayed live, taking a
// pool slot and the id.
func TestLedgerFull(t *testing.T) {
	dir := scratchtest.Tmpfs(t, 4)
	m, machines := sessiontest.NewManager(t, dir, session.Config{}, nil)
	ctx := context.Background()
	a, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	filler := fillDir(t, dir)
	_, err = m.Fork(ctx, a.ID, "", session.OriginManual)
	sessiontest.WantErr(t, err, errkind.ErrExhausted, "")
	for _, want := range []string{filepath.Join(dir, "ledger.db"), "ENOSPC", "insert checkpoint"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Fork on a full state dir: %q does not say %q", err, want)
		}
	}
	if cps, err := m.Checkpoints(ctx, a.ID, true); err != nil || len(cps) != 0 {
		t.Errorf("checkpoints after the failed Fork: %v %v, want none", cps, err)
	}
	if got := machines.At(0).Checkpoints(); len(got) != 0 {
		t.Errorf("machine checkpoints after the failed Fork: %v, want none", got)
	}
	if _, err := m.Apply(ctx, a.ID, &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d", Mode: 0o755}}}); err != nil {
		t.Errorf("Apply on a full state dir: %v, want it answered (its event is logged as lost)", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c, err := m.Fork(ctx, a.ID, "", session.OriginManual)
	if err != nil || c.ID != "c-1" {
		t.Fatalf("Fork with room again: %v %v, want c-1", c, err)
	}
	if err := m.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if in, err := m.Get(ctx, a.ID); err != nil || in.State != session.StateEnded {
		t.Errorf("after Delete: %v %v, want ended", in, err)
	}
}

// fillDir writes a file in dir until its file system is full.
func fillDir(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); errors.Is(err, syscall.ENOSPC) {
			return p
		} else if err != nil {
			t.Fatal(err)
		}
	}
}
