package session_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// TestRealGuest drives one real session (QEMU, ext2 and ext4 lanes) through
// forks, ops, restores, the pools, RestoreFile, a daemon restart and Delete.
func TestRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	check := vmmtest.Leaks(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := session.Config{MakeBase: baseimage.Make, StateDir: dir, CacheDir: env.CacheDir, ManualCheckpoints: 2, AutoCheckpoints: 2, Log: zaptest.NewLogger(t)}
	m, err := session.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2", "ext4"}, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	sid := in.ID
	apply := func(t *testing.T, op *agentv1.Request) {
		t.Helper()
		res, err := m.Apply(ctx, sid, op)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Errno != 0 {
				t.Fatalf("%v on %s: errno %d %s", op, r.Lane, r.Errno, r.Error)
			}
		}
	}
	roots := func(t *testing.T) map[string][]byte {
		t.Helper()
		fps, err := m.Fingerprint(ctx, sid, agentv1.TimeMode_TIME_MODE_ALL, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := make(map[string][]byte)
		for _, f := range fps {
			out[f.Lane] = f.Root
		}
		return out
	}
	write := func(path, data string) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: path, Flags: agent.OpenWronly | agent.OpenCreat | agent.OpenTrunc, Data: []byte(data)}}}
	}
	read := func(t *testing.T, lane, path string) (string, int32) {
		t.Helper()
		data, _, res, err := m.ReadFile(ctx, sid, lane, path, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return string(data), res.Errno
	}

	var c1 *session.Checkpoint
	t.Run("ForkApplyRestore", func(t *testing.T) {
		apply(t, write("old", "old content"))
		if c1, err = m.Fork(ctx, sid, "base", session.OriginManual); err != nil {
			t.Fatal(err)
		}
		// Fork may read changed files to keep them (atime), so the roots
		// are compared with a fingerprint taken after it.
		now := roots(t)
		for lane, r := range c1.Roots {
			if !bytes.Equal(r, now[lane]) {
				t.Errorf("lane %s: checkpoint root %x, fingerprint after fork %x", lane, r, now[lane])
			}
		}
		apply(t, &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d", Mode: 0o755}}})
		apply(t, &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Path: "d/f", Flags: agent.OpenWronly, Mode: 0o644}}})
		apply(t, write("d/f", "hello"))
		after := roots(t)
		for lane := range c1.Roots {
			if bytes.Equal(after[lane], c1.Roots[lane]) {
				t.Errorf("lane %s: fingerprint unchanged by the ops", lane)
			}
		}
		if _, d, err := m.Restore(ctx, sid, "base"); err != nil || d <= 0 {
			t.Fatalf("restore: %v, %v", d, err)
		}
		got := roots(t)
		for lane := range c1.Roots {
			if !bytes.Equal(got[lane], c1.Roots[lane]) {
				t.Errorf("lane %s: root after restore %x, want %x", lane, got[lane], c1.Roots[lane])
			}
		}
	})

	t.Run("RestoreFile", func(t *testing.T) {
		apply(t, write("old", "modified after the checkpoint, longer"))
		apply(t, write("new", "created after"))
		removed, size, err := m.RestoreFile(ctx, sid, c1.ID, "ext4", "old")
		if err != nil || removed || size != int64(len("old content")) {
			t.Fatalf("restore old: removed %v size %d err %v", removed, size, err)
		}
		if got, _ := read(t, "ext4", "old"); got != "old content" {
			t.Errorf("ext4 old = %q, want the checkpoint's content", got)
		}
		if got, _ := read(t, "ext2", "old"); got != "modified after the checkpoint, longer" {
			t.Errorf("ext2 old = %q: other lanes must stay as they are", got)
		}
		if removed, _, err := m.RestoreFile(ctx, sid, c1.ID, "ext4", "new"); err != nil || !removed {
			t.Fatalf("restore new: removed %v err %v", removed, err)
		}
		if _, errno := read(t, "ext4", "new"); errno == 0 {
			t.Error("ext4 new still exists")
		}
		// A symlinked parent is refused.
		apply(t, &agentv1.Request{Op: &agentv1.Request_Symlink{Symlink: &agentv1.Symlink{Target: "/", Path: "esc"}}})
		_, _, err = m.RestoreFile(ctx, sid, c1.ID, "ext4", "esc/etc/passwd")
		sessiontest.WantErr(t, err, errkind.ErrInvalid, "path")
	})

	t.Run("Pools", func(t *testing.T) {
		if _, err := m.Fork(ctx, sid, "", session.OriginManual); err != nil {
			t.Fatal(err)
		}
		_, err := m.Fork(ctx, sid, "", session.OriginManual)
		sessiontest.WantErr(t, err, errkind.ErrExhausted, "")
		var autos []*session.Checkpoint
		for range 3 {
			c, err := m.Fork(ctx, sid, "", session.OriginAuto)
			if err != nil {
				t.Fatal(err)
			}
			autos = append(autos, c)
		}
		live, err := m.Checkpoints(ctx, sid, false)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range live {
			ids = append(ids, c.ID)
		}
		want := []string{c1.ID, "c-2", autos[1].ID, autos[2].ID}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("live %v, want %v (oldest auto evicted)", ids, want)
		}
		// The neighbours of the evicted one stay restorable.
		if _, _, err := m.Restore(ctx, sid, autos[1].ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := m.Restore(ctx, sid, "c-2"); err != nil {
			t.Fatal(err)
		}
		_, _, err = m.Restore(ctx, sid, autos[2].ID)
		sessiontest.WantErr(t, err, errkind.ErrState, "")
	})

	// Restart: close (guest stopped, "daemon stopped"), open again.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	check() // no QEMU child, no fd left
	m2, err := session.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	got, err := m2.Get(ctx, sid)
	if err != nil || got.State != session.StateEnded || got.Reason != "daemon stopped" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	cps, err := m2.Checkpoints(ctx, sid, true)
	if err != nil || len(cps) < 5 {
		t.Errorf("checkpoints after restart: %d %v", len(cps), err)
	}
	evs, err := m2.Events(ctx, sid, 0, 1000)
	if err != nil || len(evs) < 10 {
		t.Errorf("events after restart: %d %v", len(evs), err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	for _, k := range []string{"restored_file", "checkpoint.evicted", "session.ended"} {
		if !strings.Contains(strings.Join(kinds, ","), k) {
			t.Errorf("events %v lack %s", kinds, k)
		}
	}
	_, err = m2.Apply(ctx, sid, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
	sessiontest.WantErr(t, err, errkind.ErrState, "")

	// Delete leaves no QEMU child behind.
	check2 := vmmtest.Leaks(t)
	in2, err := m2.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Delete(ctx, in2.ID); err != nil {
		t.Fatal(err)
	}
	check2()
	if err := m2.Delete(ctx, in2.ID); !errors.Is(err, errkind.ErrState) {
		t.Errorf("second delete: %v, want errkind.ErrState", err)
	}
}
