package memguard

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"golang.org/x/sys/unix"
)

// truncatedMapping maps a file of two pages and truncates the file to
// zero under the mapping: every access to it then raises SIGBUS, which is
// how a full tmpfs looks to a reader, made deterministic.
func truncatedMapping(t *testing.T) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "ram"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 2 * 4096
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Munmap(mem); err != nil {
			t.Error(err)
		}
	})
	mem[0] = 1 // backed while the file is long enough
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	return mem
}

var sink byte

func TestRun(t *testing.T) {
	mem := truncatedMapping(t)
	tests := []struct {
		name      string
		fn        func()
		wantFault bool
	}{
		{"read past the file", func() { sink = mem[4096] }, true},
		{"write past the file", func() { mem[0] = 2 }, true},
		{"copy from the mapping", func() { copy(make([]byte, len(mem)), mem) }, true},
		{"no fault", func() { sink = 1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(tc.fn)
			if got := errors.Is(err, ErrFault); got != tc.wantFault {
				t.Fatalf("Run: %v; want a fault %v", err, tc.wantFault)
			}
		})
	}
}

// TestRunRestoresSetting checks that Run leaves the goroutine's
// panic-on-fault setting as it found it, faulted or not, nested or not.
func TestRunRestoresSetting(t *testing.T) {
	mem := truncatedMapping(t)
	for _, prev := range []bool{false, true} {
		debug.SetPanicOnFault(prev)
		var inner error
		outer := Run(func() {
			inner = Run(func() { sink = mem[0] })
			sink = mem[0]
		})
		if !errors.Is(inner, ErrFault) || !errors.Is(outer, ErrFault) {
			t.Errorf("nested Run: inner %v, outer %v; want both faults", inner, outer)
		}
		if got := debug.SetPanicOnFault(false); got != prev {
			t.Errorf("after Run, panic-on-fault %v; want %v as before", got, prev)
		}
	}
}

// TestRunPassesOtherPanics: a nil dereference (a bug) and a plain panic
// are not turned into errors.
func TestRunPassesOtherPanics(t *testing.T) {
	var nilMem *[4096]byte
	tests := []struct {
		name string
		fn   func()
	}{
		{"nil dereference", func() { sink = nilMem[8] }},
		{"panic", func() { panic("boom") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not propagate")
				}
			}()
			err := Run(tc.fn)
			t.Fatalf("Run returned %v", err)
		})
	}
}
