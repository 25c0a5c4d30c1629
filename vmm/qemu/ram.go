package qemu

import (
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"sync"

	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/internal/scratch"
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
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("qemu: guest RAM file: %w", err)
	}
	r := &ramFile{path: path, size: size, linked: true}
	r.lock, err = scratch.LockFile(path)
	if err == nil {
		err = f.Truncate(size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return r, fmt.Errorf("qemu: guest RAM file: %w", err)
	}
	return r, nil
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
	if err := tree.Arm(nil); err != nil {
		return nil, fmt.Errorf("qemu: RAM deltas: %w", err)
	}
	r.tree = tree
	parallel(len(r.digest), func(lo, hi int) {
		for p := lo; p < hi; p++ {
			r.digest[p] = r.pageDigest(r.shadow, p)
		}
	})
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

// parallel splits [0, n) over a few goroutines.
func parallel(n int, f func(lo, hi int)) {
	workers := max(1, min(runtime.GOMAXPROCS(0), 4))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(n*w/workers, n*(w+1)/workers)
		}()
	}
	wg.Wait()
}

// scan adds to the tree's dirty set every page whose digest in RAM differs
// from its shadow page's.
func (r *ramTree) scan() {
	var mu sync.Mutex
	var changed []int
	parallel(len(r.digest), func(lo, hi int) {
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
	for _, p := range changed {
		r.tree.Dirty().Add(p)
	}
}

// checkpoint records RAM as it is now.
func (r *ramTree) checkpoint() (fork.ID, error) {
	r.scan()
	return r.tree.Checkpoint()
}

// restore puts RAM back to checkpoint id and drops the checkpoints above
// it; it returns the number of pages copied.
func (r *ramTree) restore(id fork.ID) (int, error) {
	r.scan()
	return r.tree.Restore(id)
}

// delete drops checkpoint id; the others stay restorable.
func (r *ramTree) delete(id fork.ID) error { return r.tree.Delete(id) }

// depth is the number of checkpoints held.
func (r *ramTree) depth() int { return r.tree.Depth() }
