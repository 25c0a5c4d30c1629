package qemu

import (
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/internal/budget"
	"github.com/themisfs/themis/internal/memguard"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/vmm"
	"golang.org/x/sys/unix"
)

// pageSize is the granularity of RAM deltas.
const pageSize = 4096

// ramFile is guest RAM: a file in tmpfs that QEMU maps as its memory backend
// and that we map too.
type ramFile struct {
	path   string
	size   int64
	mem    []byte
	linked bool
	// lock is held while the file may be linked, so that a daemon's startup
	// sweep (scratch.Sweep) leaves it alone.
	lock *scratch.Lock
}

func newRAMFile(path string, size int64) (*ramFile, error) {
	f, lock, err := scratch.CreateFile(path) // locked before it has its name
	if err != nil {
		return nil, fmt.Errorf("qemu: guest RAM file: %w", err)
	}
	r := &ramFile{path: path, size: size, linked: true, lock: lock}
	err = allocate(f, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return r, fmt.Errorf("qemu: guest RAM file: %w", err)
	}
	return r, nil
}

// allocate gives the RAM file all its size bytes of blocks now, so that a
// file system that cannot hold the guest's RAM refuses it here, with an
// error wrapping vmm.ErrNoRAM, and not at the first touch of a page it
// cannot back: that is a SIGBUS, in QEMU or in the daemon, which no Go
// code recovers from unguarded. MAP_POPULATE does not do it: it leaves the
// pages it fails to allocate unmapped and says nothing. A file system
// without fallocate gets a sparse file, checked against its free space.
func allocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		free, ferr := scratch.Free(filepath.Dir(f.Name()))
		switch {
		case ferr != nil:
			return ferr
		case free < size:
			err = unix.ENOSPC
		default:
			return f.Truncate(size)
		}
	}
	switch {
	case errors.Is(err, unix.ENOSPC):
		return noRoom(f, size)
	case err != nil:
		return fmt.Errorf("fallocate %d bytes: %w", size, err)
	}
	return nil
}

// noRoom is allocate's error for a file system without room for size
// bytes: it names the dir, its free space and the size.
func noRoom(f *os.File, size int64) error {
	// tmpfs undoes a failed fallocate; other file systems may keep a part.
	if err := f.Truncate(0); err != nil {
		return err
	}
	dir := filepath.Dir(f.Name())
	free, err := scratch.Free(dir)
	if err != nil {
		return err
	}
	return fmt.Errorf("%s has %s free, less than the guest's %s (grow that file system or point %s at a larger one): %w",
		dir, budget.Size(free), budget.Size(size), ScratchEnv, vmm.ErrNoRAM)
}

// mapIt maps the RAM file once QEMU has opened it, then unlinks it so that
// nothing is left behind whatever happens next.
func (r *ramFile) mapIt() error {
	f, err := os.OpenFile(r.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("qemu: open guest RAM: %w", err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, int(r.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("qemu: mmap guest RAM: %w", err)
	}
	r.mem = mem
	if err := os.Remove(r.path); err != nil {
		return fmt.Errorf("qemu: unlink guest RAM file: %w", err)
	}
	r.linked = false
	return nil
}

func (r *ramFile) close() error {
	var errs []error
	if r.mem != nil {
		if err := unix.Munmap(r.mem); err != nil {
			errs = append(errs, fmt.Errorf("qemu: munmap guest RAM: %w", err))
		}
		r.mem = nil
	}
	if r.linked {
		if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("qemu: remove guest RAM file: %w", err))
		}
		r.linked = false
	}
	if err := r.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("qemu: guest RAM file: %w", err))
	}
	return errors.Join(errs...)
}

// ramTree is what the devices-only restore needs to put RAM back: a
// fork.Tree over guest RAM (the shadow copy of RAM at the newest checkpoint
// and an undo log per checkpoint), fed with the dirty set that a page scan
// finds, since QEMU under TCG has no dirty log to read.
//
// The scan reads guest RAM once and compares a 64-bit digest of every page
// with the digest of its shadow page (maphash, AES-based, seeded per
// machine: the guest cannot aim at a collision), which is about twice as
// fast as comparing RAM with the shadow byte for byte. The tree reports
// every shadow page it rewrites (fork.Tree.OnShadowWrite), which keeps the
// shadow digests true. The verify mode re-hashes everything with blake3.
//
// Every access to guest RAM (the scan, the tree's copies) is guarded
// (memguard): a page the RAM file lost is an error wrapping
// memguard.ErrFault, after which the tree is unusable, never a crash.
type ramTree struct {
	tree   *fork.Tree
	mem    []byte
	shadow []byte
	seed   maphash.Seed
	digest []uint64 // digest[p]: maphash of shadow page p
}

// newRAMTree arms a tree over mem: the shadow starts as a copy of all of it.
func newRAMTree(mem []byte) (*ramTree, error) {
	r := &ramTree{mem: mem, shadow: make([]byte, len(mem)), seed: maphash.MakeSeed(), digest: make([]uint64, len(mem)/pageSize)}
	tree, err := fork.NewTree(mem, r.shadow, pageSize)
	if err != nil {
		return nil, fmt.Errorf("qemu: RAM deltas: %w", err)
	}
	if ferr := memguard.Run(func() { err = tree.Arm(nil) }); ferr != nil {
		err = ferr
	}
	if err != nil {
		return nil, fmt.Errorf("qemu: RAM deltas: %w", err)
	}
	r.tree = tree
	if err := parallel(len(r.digest), func(lo, hi int) {
		for p := lo; p < hi; p++ {
			r.digest[p] = r.pageDigest(r.shadow, p)
		}
	}); err != nil {
		return nil, fmt.Errorf("qemu: RAM deltas: %w", err)
	}
	tree.OnShadowWrite(func(p uint32) { r.digest[p] = r.pageDigest(r.shadow, int(p)) })
	return r, nil
}

// bytes is the host memory the deltas hold: the shadow, the digests and
// the undo pages (0 for a nil tree: no checkpoint yet).
func (r *ramTree) bytes() int64 {
	if r == nil {
		return 0
	}
	return int64(len(r.shadow)) + int64(len(r.digest))*8 + int64(r.tree.UndoPages())*pageSize
}

func (r *ramTree) pageDigest(b []byte, p int) uint64 {
	return maphash.Bytes(r.seed, b[p*pageSize:(p+1)*pageSize])
}

// parallel splits [0, n) over a few goroutines, each guarded
// (memguard.Run: the setting is per goroutine); it returns the faults.
func parallel(n int, f func(lo, hi int)) error {
	workers := max(1, min(runtime.GOMAXPROCS(0), 4))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = memguard.Run(func() { f(n*w/workers, n*(w+1)/workers) })
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// scan adds to the tree's dirty set every page whose digest in RAM differs
// from its shadow page's.
func (r *ramTree) scan() error {
	var mu sync.Mutex
	var changed []int
	err := parallel(len(r.digest), func(lo, hi int) {
		var local []int
		for p := lo; p < hi; p++ {
			if r.pageDigest(r.mem, p) != r.digest[p] {
				local = append(local, p)
			}
		}
		mu.Lock()
		changed = append(changed, local...)
		mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("qemu: RAM scan: %w", err)
	}
	for _, p := range changed {
		r.tree.Dirty().Add(p)
	}
	return nil
}

// checkpoint records RAM as it is now.
func (r *ramTree) checkpoint() (id fork.ID, err error) {
	if err := r.scan(); err != nil {
		return 0, err
	}
	if ferr := memguard.Run(func() { id, err = r.tree.Checkpoint() }); ferr != nil {
		return 0, fmt.Errorf("qemu: RAM checkpoint: %w", ferr)
	}
	return id, err
}

// restore puts RAM back to checkpoint id and drops the checkpoints above
// it; it returns the number of pages copied.
func (r *ramTree) restore(id fork.ID) (pages int, err error) {
	if err := r.scan(); err != nil {
		return 0, err
	}
	if ferr := memguard.Run(func() { pages, err = r.tree.Restore(id) }); ferr != nil {
		return 0, fmt.Errorf("qemu: RAM restore: %w", ferr)
	}
	return pages, err
}

// hashRAM is fork.Hash of guest RAM, guarded.
func hashRAM(mem []byte) (h [32]byte, err error) {
	if err := memguard.Run(func() { h = fork.Hash(mem) }); err != nil {
		return h, fmt.Errorf("qemu: RAM hash: %w", err)
	}
	return h, nil
}

// delete drops checkpoint id; the others stay restorable.
func (r *ramTree) delete(id fork.ID) error { return r.tree.Delete(id) }

// depth is the number of checkpoints held.
func (r *ramTree) depth() int { return r.tree.Depth() }
