package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/internal/memguard"
	"github.com/themisfs/themis/internal/scratch/scratchtest"
	"github.com/themisfs/themis/vmm"
	"golang.org/x/sys/unix"
)

// TestRAMFileNoRoom: a RAM file larger than the free space of its tmpfs
// is refused when it is made, with an error wrapping vmm.ErrNoRAM that
// names the dir, its free space and the size, and nothing is left there;
// one that fits has all its blocks. Before the fix the file was sparse
// (truncate), every size "fitted", and the first page the tmpfs could
// not back was a SIGBUS in QEMU or in the daemon.
func TestRAMFileNoRoom(t *testing.T) {
	dir := scratchtest.Tmpfs(t, 8)
	tests := []struct {
		name    string
		size    int64
		wantErr []string // in the error; nil: no error
	}{
		{"fits", 4 << 20, nil},
		{"larger than the tmpfs", 64 << 20, []string{dir, "8.0 MiB free", "64.0 MiB", ScratchEnv}},
		{"just over the tmpfs", 8<<20 + pageSize, []string{dir, "free", "8.0 MiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newRAMFile(filepath.Join(dir, RAMFilePrefix+"test"), tc.size)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("newRAMFile(%d): %v", tc.size, err)
				}
				var st unix.Stat_t
				if err := unix.Stat(r.path, &st); err != nil {
					t.Fatal(err)
				}
				if st.Size != tc.size || st.Blocks*512 < tc.size {
					t.Errorf("RAM file: size %d, %d bytes allocated; want %d of both", st.Size, st.Blocks*512, tc.size)
				}
			} else {
				if !errors.Is(err, vmm.ErrNoRAM) {
					t.Fatalf("newRAMFile(%d) on an 8 MiB tmpfs: %v; want an error wrapping vmm.ErrNoRAM", tc.size, err)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			}
			if r != nil {
				if err := r.close(); err != nil {
					t.Fatal(err)
				}
			}
			if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
				t.Errorf("left in the tmpfs: %v %v", ents, err)
			}
		})
	}
}

// mappedRAM maps a file of pages pages, as mapIt maps guest RAM, filled
// with a pattern; cut truncates the file to zero under the mapping, so
// that every later access raises SIGBUS (what a page the tmpfs could not
// back looks like, made deterministic).
func mappedRAM(t *testing.T, pages int) (mem []byte, cut func()) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "ram"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(pages) * pageSize); err != nil {
		t.Fatal(err)
	}
	mem, err = unix.Mmap(int(f.Fd()), 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Munmap(mem); err != nil {
			t.Error(err)
		}
	})
	for i := range mem {
		mem[i] = byte(i / pageSize)
	}
	return mem, func() {
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRAMTreeFault: every access of the RAM deltas to guest RAM that lost
// its pages is an error wrapping memguard.ErrFault, and the machine's
// memory records it as breaking the machine. Before the guard each was a
// SIGBUS that killed the daemon with every session in it.
func TestRAMTreeFault(t *testing.T) {
	const pages = 64
	tests := []struct {
		name string
		op   func(mem []byte, r *ramTree) error
	}{
		{"arm", func(mem []byte, _ *ramTree) error { _, err := newRAMTree(mem); return err }},
		{"checkpoint", func(_ []byte, r *ramTree) error { _, err := r.checkpoint(); return err }},
		{"restore", func(_ []byte, r *ramTree) error { _, err := r.restore(1); return err }},
		{"hash", func(mem []byte, _ *ramTree) error { _, err := hashRAM(mem); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem, cut := mappedRAM(t, pages)
			r, err := newRAMTree(mem)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.checkpoint(); err != nil {
				t.Fatal(err)
			}
			cut()
			err = tc.op(mem, r)
			if !errors.Is(err, memguard.ErrFault) {
				t.Fatalf("%s over a RAM file cut short: %v; want an error wrapping memguard.ErrFault", tc.name, err)
			}
			var s memory
			if got := s.broke(err); !errors.Is(got, vmm.ErrBroken) || !errors.Is(got, memguard.ErrFault) {
				t.Errorf("memory.broke(%v) = %v; want it to break the machine", err, got)
			}
			if got := s.broke(errors.New("later")); got != s.fault {
				t.Errorf("after the fault, memory.broke(later) = %v; want the fault", got)
			}
		})
	}
}
