package fork

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/themisfs/themis/internal/memguard"
	"golang.org/x/sys/unix"
)

// TestRestoreFaultIsError: RAM whose file lost its pages under the mapping
// (truncated: what a full tmpfs looks like, made deterministic) makes the
// parallel copy back fail with an error wrapping memguard.ErrFault; before,
// the SIGBUS in a copying goroutine crashed the process.
func TestRestoreFaultIsError(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("with one P copyBack copies on the caller's goroutine, which the caller guards")
	}
	const pageSize, pages = 4096, 2 * parallelPages
	f, err := os.Create(filepath.Join(t.TempDir(), "ram"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(pageSize * pages); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, pageSize*pages, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Munmap(mem); err != nil {
			t.Error(err)
		}
	})
	tr, err := NewTree(mem, make([]byte, len(mem)), pageSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Arm(nil); err != nil {
		t.Fatal(err)
	}
	id, err := tr.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	for p := range pages {
		tr.Dirty().Add(p)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	var rerr error
	if gerr := memguard.Run(func() { _, rerr = tr.Restore(id) }); gerr != nil {
		t.Fatalf("the fault reached the caller's goroutine (%v): the copy back did not run in parallel", gerr)
	}
	if !errors.Is(rerr, memguard.ErrFault) {
		t.Fatalf("Restore over a truncated RAM file: %v; want an error wrapping memguard.ErrFault", rerr)
	}
}
