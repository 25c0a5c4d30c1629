package scratchtest

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of sizeMiB MiB on a new temp dir (Mount) and
// returns the dir.
func Tmpfs(t testing.TB, sizeMiB int) string {
	t.Helper()
	dir := t.TempDir()
	Mount(t, dir, sizeMiB)
	return dir
}

// Mount mounts a tmpfs of sizeMiB MiB on the existing dir; the test's
// cleanup unmounts it (failing the test if that fails: something still
// uses it). Without the privilege to mount, the test skips.
func Mount(t testing.TB, dir string, sizeMiB int) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%dm,mode=0700", sizeMiB)); err != nil {
		if err == unix.EPERM || unix.Geteuid() != 0 {
			t.Skipf("mount a %d MiB tmpfs: %v (needs root)", sizeMiB, err)
		}
		t.Fatalf("mount a %d MiB tmpfs on %s: %v", sizeMiB, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount the tmpfs on %s: %v", dir, err)
		}
	})
}
