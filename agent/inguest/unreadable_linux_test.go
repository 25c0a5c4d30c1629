package inguest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// bindOver bind-mounts src over the existing path dst until the test ends;
// it skips the test where mounting is not allowed.
func bindOver(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("bind mount not allowed here: %v", err)
		}
		t.Fatalf("bind mount %s over %s: %v", src, dst, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
}

// deadProcDir is a /proc directory of a process that has exited: opening
// or listing it fails with an errno, as a corrupt directory would.
func deadProcDir(t *testing.T, dst string) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bindOver(t, filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "fdinfo"), dst)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("sleep exited cleanly after a kill")
	}
}

// TestFingerprintUnreadable: what the filesystem refuses to read is an
// entry with its errno, not a failed walk; the rest of the tree is walked.
func TestFingerprintUnreadable(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	setup(t, dir)
	clean := must(t, s, fp(agentv1.TimeMode_TIME_MODE_NONE, true)).GetFingerprint()
	if clean.GetUnreadable() != 0 || clean.GetFirstUnreadable() != "" {
		t.Fatalf("a readable tree has unreadable entries: %v", clean)
	}
	// Reading /proc/self/mem at offset 0 fails with EIO in the reader,
	// which is the walking test process itself.
	if err := os.WriteFile(filepath.Join(dir, "d/bad"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bindOver(t, "/proc/self/mem", filepath.Join(dir, "d/bad"))
	deadProcDir(t, filepath.Join(dir, "e"))
	if err := os.WriteFile(filepath.Join(dir, "z"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}

	r := must(t, s, fp(agentv1.TimeMode_TIME_MODE_NONE, true)).GetFingerprint()
	byPath := map[string]*agentv1.Entry{}
	for _, e := range r.GetLeaves() {
		byPath[e.GetPath()] = e
	}
	bad := byPath["d/bad"]
	if bad.GetReadErrno() != uint32(unix.EIO) || bad.GetContentHash() != nil || bad.GetKind() != agentv1.Kind_KIND_REGULAR {
		t.Errorf("d/bad = %v, want a regular file with read_errno EIO and no content hash", bad)
	}
	if e := byPath["e"]; e.GetReadErrno() == 0 {
		t.Errorf("e (a dead process's directory) = %v, want a read_errno", e)
	}
	for _, p := range []string{"", "d", "d/f", "s", "z"} {
		if e, ok := byPath[p]; !ok || e.GetReadErrno() != 0 {
			t.Errorf("%q = %v, want a readable entry", p, e)
		}
	}
	if r.GetUnreadable() != 2 || r.GetFirstUnreadable() != "d/bad" || r.GetFirstUnreadableErrno() != uint32(unix.EIO) {
		t.Errorf("unreadable = %d, first %q errno %d; want 2, d/bad, EIO", r.GetUnreadable(), r.GetFirstUnreadable(), r.GetFirstUnreadableErrno())
	}
	if noLeaves := must(t, s, fp(agentv1.TimeMode_TIME_MODE_NONE, false)).GetFingerprint(); noLeaves.GetUnreadable() != 2 ||
		string(noLeaves.GetRoot()) != string(r.GetRoot()) {
		t.Errorf("without leaves: unreadable %d, root %x; want 2 and %x", noLeaves.GetUnreadable(), noLeaves.GetRoot(), r.GetRoot())
	}
}

func TestFsErrno(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want uint32
	}{
		{fmt.Errorf("d: read directory: %w", unix.EBADMSG), uint32(unix.EBADMSG)},
		{fmt.Errorf("f: read: %w", unix.EIO), uint32(unix.EIO)},
		{unix.EUCLEAN, uint32(unix.EUCLEAN)},
		{fmt.Errorf("x: stat: %w", unix.ENOENT), uint32(unix.ENOENT)},
		{fmt.Errorf("f: open: %w", unix.EMFILE), 0}, // the walker's own limit
		{unix.ENOMEM, 0},
		{unix.ENFILE, 0},
		{unix.EINTR, 0},
		{errors.New("hash: short write"), 0},
		{nil, 0},
	}
	for _, tt := range tests {
		if got := fsErrno(tt.err); got != tt.want {
			t.Errorf("fsErrno(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
