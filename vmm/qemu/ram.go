package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"sync"

	"github.com/zeebo/blake3"
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
}

func newRAMFile(path string, size int64) (*ramFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("qemu: guest RAM file: %w", err)
	}
	r := &ramFile{path: path, size: size, linked: true}
	err = f.Truncate(size)
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

func (r *ramFile) hash() [32]byte {
	h := blake3.New()
	// Hash in large chunks; blake3.Write never fails.
	for off := 0; off < len(r.mem); off += 1 << 20 {
		end := min(off+1<<20, len(r.mem))
		h.Write(r.mem[off:end]) //nolint:errcheck
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
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
	return errors.Join(errs...)
}

// ramDeltas keeps what the devices-only restore needs to put RAM back: a
// shadow copy of RAM as it was at the newest checkpoint on the path, a 64-bit
// hash of every shadow page, and for every later checkpoint the pages it
// changed, with their content at its parent (an undo log).
//
// Finding changed pages reads guest RAM once and compares page hashes
// (maphash, AES-based, seeded per machine: the guest cannot aim at a
// collision), which is about twice as fast as comparing RAM with the shadow
// byte for byte. The verify mode re-hashes everything with blake3.
// Restoring to checkpoint i copies back the pages whose hash differs from the
// shadow's, then unwinds the undo logs down to i.
type ramDeltas struct {
	seed   maphash.Seed
	shadow []byte
	hashes []uint64
	undo   []map[int]undoPage // undo[k]: pages changed between checkpoint k-1 and k, as at k-1; undo[0] is nil
}

type undoPage struct {
	data []byte
	hash uint64
}

func newRAMDeltas(mem []byte) *ramDeltas {
	d := &ramDeltas{
		seed:   maphash.MakeSeed(),
		shadow: make([]byte, len(mem)),
		hashes: make([]uint64, len(mem)/pageSize),
		undo:   []map[int]undoPage{nil},
	}
	copy(d.shadow, mem)
	d.parallel(len(d.hashes), func(lo, hi int) {
		for p := lo; p < hi; p++ {
			d.hashes[p] = maphash.Bytes(d.seed, d.shadow[p*pageSize:(p+1)*pageSize])
		}
	})
	return d
}

func (d *ramDeltas) depth() int { return len(d.undo) }

// parallel splits [0, n) over a few goroutines.
func (d *ramDeltas) parallel(n int, f func(lo, hi int)) {
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

type changed struct {
	page int
	hash uint64
}

// changedPages returns the pages whose hash in mem differs from the shadow's.
func (d *ramDeltas) changedPages(mem []byte) []changed {
	var mu sync.Mutex
	var out []changed
	d.parallel(len(d.hashes), func(lo, hi int) {
		var local []changed
		for p := lo; p < hi; p++ {
			if h := maphash.Bytes(d.seed, mem[p*pageSize:(p+1)*pageSize]); h != d.hashes[p] {
				local = append(local, changed{p, h})
			}
		}
		mu.Lock()
		out = append(out, local...)
		mu.Unlock()
	})
	return out
}

// push records a new checkpoint: mem is RAM at that checkpoint.
func (d *ramDeltas) push(mem []byte) {
	undo := make(map[int]undoPage)
	for _, c := range d.changedPages(mem) {
		page := d.shadow[c.page*pageSize : (c.page+1)*pageSize]
		undo[c.page] = undoPage{data: bytes.Clone(page), hash: d.hashes[c.page]}
		copy(page, mem[c.page*pageSize:])
		d.hashes[c.page] = c.hash
	}
	d.undo = append(d.undo, undo)
}

// restore puts mem back to the checkpoint at depth n (1-based: n=1 is the first
// checkpoint) and drops the checkpoints above it. It returns the number of pages copied.
func (d *ramDeltas) restore(mem []byte, n int) int {
	copied := 0
	for _, c := range d.changedPages(mem) {
		off := c.page * pageSize
		copy(mem[off:off+pageSize], d.shadow[off:off+pageSize])
		copied++
	}
	for k := len(d.undo) - 1; k >= n; k-- {
		for p, old := range d.undo[k] {
			off := p * pageSize
			copy(mem[off:off+pageSize], old.data)
			copy(d.shadow[off:off+pageSize], old.data)
			d.hashes[p] = old.hash
			copied++
		}
	}
	d.undo = d.undo[:n]
	return copied
}

// remove drops checkpoint i (0-based on the path) and keeps the others
// restorable: the undo log of the checkpoint above it is extended with the
// pages of i's own log (which hold the older values), and if i is the newest
// checkpoint the shadow goes back to its parent.
func (d *ramDeltas) remove(i int) {
	n := len(d.undo)
	switch {
	case i == n-1: // the newest: the shadow becomes its parent's RAM
		for p, old := range d.undo[i] {
			copy(d.shadow[p*pageSize:(p+1)*pageSize], old.data)
			d.hashes[p] = old.hash
		}
		d.undo = d.undo[:i]
	case i == 0: // the oldest: its child becomes the first, with no parent log
		d.undo = append([]map[int]undoPage{nil}, d.undo[2:]...)
	default:
		merged := d.undo[i+1]
		for p, old := range d.undo[i] {
			merged[p] = old
		}
		d.undo = append(d.undo[:i], d.undo[i+1:]...)
		d.undo[i] = merged
	}
}
