package fork

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/themisfs/themis/internal/memguard"
)

// ID names a checkpoint of one Tree. IDs start at 1 and are never reused.
type ID uint64

// Range is a byte range of RAM [Off, Off+Len).
type Range struct {
	// Off and Len are in bytes and must be page-aligned.
	Off, Len int
}

// Sentinel errors.
var (
	// ErrUnknownCheckpoint is returned for an ID that is not on the current path.
	ErrUnknownCheckpoint = errors.New("fork: checkpoint not on the current path")
	// ErrNotArmed is returned by Checkpoint before Arm.
	ErrNotArmed = errors.New("fork: tree not armed")
)

// undoLog holds, for the pages that changed between a checkpoint's parent
// and the checkpoint, their content at the parent: page pages[i] is
// data[i*pageSize:(i+1)*pageSize].
type undoLog struct {
	pages []uint32
	data  []byte
}

type checkpoint struct {
	id   ID
	undo undoLog
}

// Tree is the page-delta stack of one RAM region. See the package comment
// for the model and its invariants.
type Tree struct {
	mem, shadow []byte
	pageSize    int
	pages       int
	armed       bool
	dirty       *Set
	path        []checkpoint
	last        ID
	mark        []uint32 // mark[p] == epoch: page p already handled in this pass
	epoch       uint32
	todo        []uint32          // Restore's scratch list of pages to copy back
	onShadow    func(page uint32) // OnShadowWrite's hook; nil: none
}

// NewTree returns a tree over mem. shadow must be as long as mem and all
// zero (an anonymous mapping with MAP_NORESERVE is fine: Arm writes only the
// populated ranges). pageSize must be a power of two dividing len(mem).
func NewTree(mem, shadow []byte, pageSize int) (*Tree, error) {
	switch {
	case pageSize <= 0 || pageSize&(pageSize-1) != 0:
		return nil, fmt.Errorf("fork: page size %d is not a power of two", pageSize)
	case len(mem) == 0 || len(mem)%pageSize != 0:
		return nil, fmt.Errorf("fork: RAM size %d is not a positive multiple of the page size %d", len(mem), pageSize)
	case len(shadow) != len(mem):
		return nil, fmt.Errorf("fork: shadow size %d differs from RAM size %d", len(shadow), len(mem))
	case len(mem)/pageSize > 1<<32-1:
		return nil, fmt.Errorf("fork: RAM of %d pages is too large", len(mem)/pageSize)
	}
	n := len(mem) / pageSize
	return &Tree{
		mem:      mem,
		shadow:   shadow,
		pageSize: pageSize,
		pages:    n,
		dirty:    NewSet(n),
		mark:     make([]uint32, n),
	}, nil
}

// Pages is the number of pages of RAM.
func (t *Tree) Pages() int { return t.pages }

// PageSize is the page size in bytes.
func (t *Tree) PageSize() int { return t.pageSize }

// Arm takes the root copy of RAM: it copies the populated ranges (nil: all of
// RAM) into the shadow, which must still read as zero everywhere else. This
// is the one O(RAM) step. Arm resets the dirty set; it may be called once.
func (t *Tree) Arm(populated []Range) error {
	if t.armed {
		return errors.New("fork: tree already armed")
	}
	if populated == nil {
		populated = []Range{{0, len(t.mem)}}
	}
	for _, r := range populated {
		if r.Off < 0 || r.Len < 0 || r.Off%t.pageSize != 0 || r.Len%t.pageSize != 0 || r.Off+r.Len > len(t.mem) {
			return fmt.Errorf("fork: arm: bad range [%#x, +%#x) for RAM of %#x bytes", r.Off, r.Len, len(t.mem))
		}
	}
	for _, r := range populated {
		copy(t.shadow[r.Off:r.Off+r.Len], t.mem[r.Off:r.Off+r.Len])
	}
	t.dirty.Reset()
	t.armed = true
	return nil
}

// OnShadowWrite sets f to be called, on the caller's goroutine, for every
// page of the shadow that Checkpoint, Restore or Delete rewrites, after it
// is rewritten. A caller that keeps a digest of each shadow page (the QEMU
// backend, which finds dirty pages by comparing page digests) keeps it true
// this way. nil removes the hook.
func (t *Tree) OnShadowWrite(f func(page uint32)) { t.onShadow = f }

// shadowWritten reports page p's new shadow content to the hook.
func (t *Tree) shadowWritten(p uint32) {
	if t.onShadow != nil {
		t.onShadow(p)
	}
}

// Dirty is the set of pages written since the newest checkpoint (or since
// Arm). The caller adds to it from the hypervisor's dirty log before each
// Checkpoint and Restore; a page missing from it is assumed unchanged.
func (t *Tree) Dirty() *Set { return t.dirty }

// Path lists the checkpoints on the current path, oldest first.
func (t *Tree) Path() []ID {
	ids := make([]ID, len(t.path))
	for i, c := range t.path {
		ids[i] = c.id
	}
	return ids
}

// Depth is the number of checkpoints on the path.
func (t *Tree) Depth() int { return len(t.path) }

// UndoPages is the number of pages held in undo logs (the memory cost of
// the path beyond the shadow).
func (t *Tree) UndoPages() int {
	n := 0
	for _, c := range t.path {
		n += len(c.undo.pages)
	}
	return n
}

func (t *Tree) page(b []byte, p uint32) []byte {
	off := int(p) * t.pageSize
	return b[off : off+t.pageSize]
}

// nextEpoch starts a dedup pass over mark.
func (t *Tree) nextEpoch() {
	t.epoch++
	if t.epoch == 0 {
		clear(t.mark)
		t.epoch = 1
	}
}

// Checkpoint pushes a checkpoint of the current RAM. It costs O(Dirty):
// every dirty page's shadow content moves to the new checkpoint's undo log
// and the page is copied into the shadow.
func (t *Tree) Checkpoint() (ID, error) {
	if !t.armed {
		return 0, ErrNotArmed
	}
	dirty := t.dirty.Pages()
	var u undoLog
	// The oldest checkpoint on the path never needs an undo log: nothing
	// restores to its parent.
	if len(t.path) > 0 && len(dirty) > 0 {
		u.pages = append([]uint32(nil), dirty...)
		u.data = make([]byte, len(dirty)*t.pageSize)
	}
	for i, p := range dirty {
		s := t.page(t.shadow, p)
		if u.data != nil {
			copy(u.data[i*t.pageSize:], s)
		}
		copy(s, t.page(t.mem, p))
		t.shadowWritten(p)
	}
	t.dirty.Reset()
	t.last++
	t.path = append(t.path, checkpoint{id: t.last, undo: u})
	return t.last, nil
}

func (t *Tree) find(id ID) (int, error) {
	for i, c := range t.path {
		if c.id == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: %d", ErrUnknownCheckpoint, id)
}

// Restore puts RAM back to checkpoint id and drops the checkpoints above it;
// id stays on the path and can be restored again. It copies each page
// dirtied since id exactly once and returns how many it copied.
func (t *Tree) Restore(id ID) (int, error) {
	k, err := t.find(id)
	if err != nil {
		return 0, err
	}
	t.nextEpoch()
	copied := 0
	// Oldest dropped checkpoint first: the first undo entry met for a page
	// holds its content at k.
	for j := k + 1; j < len(t.path); j++ {
		u := &t.path[j].undo
		for i, p := range u.pages {
			if t.mark[p] == t.epoch {
				continue
			}
			t.mark[p] = t.epoch
			src := u.data[i*t.pageSize : (i+1)*t.pageSize]
			copy(t.page(t.mem, p), src)
			copy(t.page(t.shadow, p), src)
			t.shadowWritten(p)
			copied++
		}
	}
	todo := t.todo[:0]
	for _, p := range t.dirty.Pages() {
		if t.mark[p] == t.epoch {
			continue
		}
		t.mark[p] = t.epoch
		todo = append(todo, p)
	}
	if err := t.copyBack(todo); err != nil {
		return 0, fmt.Errorf("fork: restore %d: %w", id, err)
	}
	copied += len(todo)
	t.todo = todo
	t.dirty.Reset()
	clear(t.path[k+1:])
	t.path = t.path[:k+1]
	return copied, nil
}

// parallelPages is the dirty-page count from which copyBack splits the
// copy over several goroutines: scattered 4 KiB copies are bound by memory
// latency (TLB misses), not bandwidth, so more cores copy faster.
const parallelPages = 1024

// maxCopyWorkers bounds copyBack's goroutines (a variable for the
// side-by-side benchmark).
var maxCopyWorkers = 4

// copyBack copies the given pages from the shadow into RAM, in parallel
// when there are many. Each copying goroutine is guarded (memguard.Run): a
// RAM page its mapping cannot back is an error wrapping memguard.ErrFault,
// not a crash; the tree is then unusable. (The caller guards its own
// goroutine, which copies when there are few pages.)
func (t *Tree) copyBack(pages []uint32) error {
	copyPages := func(part []uint32) {
		for _, p := range part {
			copy(t.page(t.mem, p), t.page(t.shadow, p))
		}
	}
	workers := min(runtime.GOMAXPROCS(0), maxCopyWorkers, len(pages)/(parallelPages/2))
	if workers < 2 {
		copyPages(pages)
		return nil
	}
	var wg sync.WaitGroup
	chunk := (len(pages) + workers - 1) / workers
	errs := make([]error, (len(pages)+chunk-1)/chunk)
	for i := range errs {
		part := pages[i*chunk : min((i+1)*chunk, len(pages))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = memguard.Run(func() { copyPages(part) })
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Delete removes checkpoint id from the path; the others stay restorable and
// RAM is unchanged. Its undo log merges into its child's (the older content
// wins), or, for the newest checkpoint, goes back into the shadow with its
// pages marked dirty.
func (t *Tree) Delete(id ID) error {
	k, err := t.find(id)
	if err != nil {
		return err
	}
	u := t.path[k].undo
	switch {
	case k == len(t.path)-1:
		for i, p := range u.pages {
			copy(t.page(t.shadow, p), u.data[i*t.pageSize:(i+1)*t.pageSize])
			t.shadowWritten(p)
			t.dirty.Add(int(p))
		}
	case k == 0:
		// The child becomes the oldest and needs no undo log.
		t.path[1].undo = undoLog{}
	default:
		t.path[k+1].undo = t.merge(u, t.path[k+1].undo)
	}
	t.path = slices.Delete(t.path, k, k+1) // zeroes the vacated tail element
	return nil
}

// merge returns the undo log of a child whose parent older was deleted:
// older's entries win over newer's for the same page.
func (t *Tree) merge(older, newer undoLog) undoLog {
	t.nextEpoch()
	out := undoLog{
		pages: make([]uint32, 0, len(older.pages)+len(newer.pages)),
		data:  make([]byte, 0, (len(older.pages)+len(newer.pages))*t.pageSize),
	}
	for _, l := range []undoLog{older, newer} {
		for i, p := range l.pages {
			if t.mark[p] == t.epoch {
				continue
			}
			t.mark[p] = t.epoch
			out.pages = append(out.pages, p)
			out.data = append(out.data, l.data[i*t.pageSize:(i+1)*t.pageSize]...)
		}
	}
	return out
}
