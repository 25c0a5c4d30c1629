package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// busy says whether path is flocked by someone else (a sweeper's probe).
func busy(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// TestRAMFileHeldWhileLinked: the guest RAM file is flocked from its
// creation until it is gone, so a daemon's startup sweep can tell a live
// boot's file from a dead daemon's leftover.
func TestRAMFileHeldWhileLinked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "themis-ram-test")
	r, err := newRAMFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !busy(t, path) {
		t.Error("a linked RAM file is not locked by its owner")
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("RAM file after close: %v", err)
	}
}
