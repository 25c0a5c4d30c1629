package explore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// search is the state one Run shares between its workers. Every field
// below mu is guarded by it; the workers drive their Systems without it.
type search struct {
	*Checker
	rootKey string
	lanes   []string
	replace func(ctx context.Context, i int, dead System) (System, error) // Workers.Replace
	fresh   func(ctx context.Context, i int, live System) (System, error) // Workers.Fresh
	genMu   sync.Mutex                                                    // serializes the Generator

	mu       sync.Mutex
	wake     *sync.Cond // an item queued, an item done, or the search stopping
	res      Result
	visited  map[string]int      // root tuple -> shallowest depth seen
	declared map[string]bool     // root tuples judged by a declared difference
	edges    map[string][]edge   // root tuple -> the ops that led to it
	cands    map[string][]cand   // signature -> every sighting of it
	killers  map[string]bool     // root tuple + "\x00" + op key: ops that crashed the kernel there
	sigs     map[string]*Finding // signature -> its finding (canonical once resolved)
	order    []*Finding          // findings in the order first found
	queue    []*item
	busy     int   // workers running an item
	idle     int   // workers waiting for one
	halt     error // the first error or stop that ends the search
	resolved bool  // the findings are their canonical sightings (resolve ran at the end)
	progress int   // States at the last Progress call
	depth    int   // depth of the state last visited
}

// item is a piece of the search a worker runs: the ops still to try at
// the state prefix leads to (depth len(prefix), key its root tuple), and
// everything below them.
type item struct {
	prefix   []*agentv1.Request
	depth    int // of the state prefix leads to (a burst is one step, many ops)
	key      string
	ops      []*agentv1.Request
	attempts int        // times a worker died running it
	marks    []mark     // what it added to visited, to take back if its worker dies
	mu       sync.Mutex // guards marks (the worker and nobody else appends)
}

// mark is one change to visited: key set to depth, from prev (-1: absent).
type mark struct {
	key         string
	depth, prev int
}

// worker drives one System. root is its root checkpoint; at is true while
// the System is in the root state.
type worker struct {
	s      *search
	i      int
	sys    System
	root   CheckpointID
	at     bool
	frames []*frame // the states of its path whose ops it is trying, shallowest first
	// fresh is true while no op ran on sys since Replace or Fresh made it
	// (minimizing a kernel finding, see reproduceKernel).
	fresh bool
}

func newSearch(c *Checker) *search {
	s := &search{Checker: c, visited: map[string]int{}, declared: map[string]bool{}, edges: map[string][]edge{}, cands: map[string][]cand{}, sigs: map[string]*Finding{}, killers: map[string]bool{}}
	s.wake = sync.NewCond(&s.mu)
	return s
}

// rng returns the generator of the ops tried at the state with root tuple
// key: reproducible from the seed and the state alone, so that which
// worker reaches a state first, or along which trace, cannot change what
// is tried there.
func (s *search) rng(key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(s.cfg.Seed, h.Sum64()))
}

// sortedKeys are the visited root tuples, sorted. s.mu is held.
func (s *search) sortedKeys() []string {
	keys := make([]string, 0, len(s.visited))
	for k := range s.visited {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// uniqueByDepth counts the visited states by their shallowest depth.
// s.mu is held.
func (s *search) uniqueByDepth() []int {
	var by []int
	for _, d := range s.visited {
		by = countAt(by, d)
	}
	return by
}

// countAt adds one to by[d], growing by as needed.
func countAt(by []int, d int) []int {
	for len(by) <= d {
		by = append(by, 0)
	}
	by[d]++
	return by
}

// digest is sha256 over the sorted root tuples of the unique states: equal
// digests mean the same set of states. s.mu is held.
func (s *search) digest() []byte { return Digest(s.sortedKeys()) }

// Digest is a search's digest of its sorted state keys.
func Digest(keys []string) []byte {
	h := sha256.New()
	for _, k := range keys {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(k)))
		h.Write(n[:])
		h.Write([]byte(k))
	}
	return h.Sum(nil)
}

// traceLess orders traces canonically: shorter first, then by their ops'
// keys. Among the findings of one signature, and the traces reaching one
// state, the least is the one kept, whoever found it first.
func traceLess(a, b []*agentv1.Request) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	for i := range a {
		if c := strings.Compare(opKey(a[i]), opKey(b[i])); c != 0 {
			return c < 0
		}
	}
	return false
}

// edge is an op applied at the state parent (a root tuple).
type edge struct {
	parent string
	op     *agentv1.Request
}

// seen records that op at the state parent led to the state key at depth,
// under s.mu: it reports whether the state is new and whether to expand
// it (new, or seen only deeper until now), recording the change in it's
// marks.
func (s *search) seen(it *item, parent string, op *agentv1.Request, key string, depth int) (isNew, expand bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.edges[key] = append(s.edges[key], edge{parent, op})
	d, ok := s.visited[key]
	if ok && d <= depth {
		return false, false
	}
	prev := -1
	if ok {
		prev = d
	}
	s.visited[key] = depth
	it.mu.Lock()
	it.marks = append(it.marks, mark{key: key, depth: depth, prev: prev})
	it.mu.Unlock()
	return !ok, true
}

// canonical is the least trace (traceLess) of every state from the root
// over the edges the search applied, level by level: a state's is the
// least of its parents' one level up, each with its op. It does not
// depend on the order in which the search met the edges. s.mu is held.
func (s *search) canonical() map[string][]*agentv1.Request {
	levels := map[int][]string{}
	top := 0
	for k, d := range s.visited {
		levels[d] = append(levels[d], k)
		top = max(top, d)
	}
	canon := map[string][]*agentv1.Request{s.rootKey: nil}
	for d := 1; d <= top; d++ {
		for _, k := range levels[d] {
			var best []*agentv1.Request
			found := false
			for _, e := range s.edges[k] {
				pt, ok := canon[e.parent]
				if !ok || s.visited[e.parent] != d-1 {
					continue
				}
				t := appendStep(pt, e.op)
				if !found || traceLess(t, best) {
					best, found = t, true
				}
			}
			if found {
				canon[k] = best
			}
		}
	}
	return canon
}

// rollback takes back what a dead worker's item added to visited, where
// nobody changed it since. s.mu is held.
func (s *search) rollback(it *item) {
	it.mu.Lock()
	defer it.mu.Unlock()
	for i := len(it.marks) - 1; i >= 0; i-- {
		m := it.marks[i]
		if d, ok := s.visited[m.key]; !ok || d != m.depth {
			continue
		}
		if m.prev < 0 {
			delete(s.visited, m.key)
		} else {
			s.visited[m.key] = m.prev
		}
	}
	it.marks = nil
}

// cand is one sighting of a finding: at the state at (a root tuple; ""
// when the finding has no state, e.g. a replay check's), after op when
// the finding is an op's (an errno divergence).
type cand struct {
	f  Finding
	at string
	op *agentv1.Request
}

// add records a sighting of a finding at the state at (after op, for an
// op's finding). The first sighting of a signature is reported to
// Config.Found at once and numbered; resolve later picks, among all the
// sightings of each signature, the one with the least canonical trace, so
// that the finding kept does not depend on who found it first.
func (s *search) add(f Finding, at string, op *agentv1.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.Seed = s.cfg.Seed
	f.OriginalLen = len(f.Trace)
	f.sig = signature(f)
	s.cands[f.sig] = append(s.cands[f.sig], cand{f: f, at: at, op: op})
	if _, ok := s.sigs[f.sig]; ok {
		return nil
	}
	f.ID = len(s.order) + 1
	kept := f
	s.sigs[f.sig] = &kept
	s.order = append(s.order, &kept)
	if s.cfg.Found != nil {
		s.cfg.Found(f)
	}
	if s.cfg.MaxFindings > 0 && len(s.order) >= s.cfg.MaxFindings {
		return &stopError{StopFindings}
	}
	return nil
}

// resolve makes each finding its canonical sighting: the least canonical
// trace among its sightings (a sighting's state's canonical trace, with
// its op), keeping the finding's ID. s.mu is held.
func (s *search) resolve() {
	canon := s.canonical()
	for sig, f := range s.sigs {
		if len(s.cands[sig]) == 0 {
			continue // made by hand (tests): nothing to choose from
		}
		var best *cand
		var bestTrace []*agentv1.Request
		for i := range s.cands[sig] {
			c := &s.cands[sig][i]
			t := c.f.Trace
			if ct, ok := canon[c.at]; ok && c.at != "" {
				t = ct
				if c.op != nil {
					t = appendStep(ct, c.op)
				}
			}
			if best == nil || traceLess(t, bestTrace) {
				best, bestTrace = c, t
			}
		}
		id := f.ID
		*f = best.f
		f.ID, f.Trace, f.OriginalLen = id, bestTrace, len(bestTrace)
		f.Found = slices.Clone(bestTrace)
	}
}

// step is called before every op: it enforces budgets, ends the worker
// when the search is halting, and reports progress.
func (s *search) step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.halt != nil:
		return errHalted
	case s.cfg.MaxStates > 0 && s.res.States >= s.cfg.MaxStates:
		return &stopError{StopBudget}
	case s.cfg.Stop != nil && s.cfg.Stop():
		return &stopError{StopRequested}
	}
	if s.cfg.Progress != nil && s.res.States-s.progress >= s.cfg.ProgressEvery {
		s.progress = s.res.States
		s.cfg.Progress(s.snapshot())
	}
	return nil
}

// mine reports whether op at the state self, of depth depth, is this
// shard's to apply (always, but at the divided level).
func (s *search) mine(self string, op *agentv1.Request, depth int) bool {
	sh := s.cfg.Shard
	if !sh.active() || depth != sh.Depth-1 {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(self))
	h.Write([]byte{0})
	h.Write([]byte(opKey(op)))
	return h.Sum64()%uint64(sh.Count) == uint64(sh.Index)
}

// errHalted ends a worker's item because another worker halted the search.
var errHalted = errors.New("explore: search halted")

func (s *search) snapshot() Progress {
	return Progress{States: s.res.States, Unique: len(s.visited), Depth: s.depth, MaxDepth: s.res.MaxDepthReached, Findings: len(s.order)}
}

// applied counts an op applied by the search at depth.
func (s *search) applied(depth int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.States++
	s.depth = depth
	s.res.MaxDepthReached = max(s.res.MaxDepthReached, depth)
}

// judged records that the state key's lanes agree only canonicalized.
func (s *search) judged(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.declared[key] = true
}

// count adds to a counter of the result under the lock.
func (s *search) count(f func(r *Result)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.res)
}

// minLeafSplit is the fewest ops left at a state whose children are not
// expanded further (leaves) that offer hands out half of: the taker
// first replays the state's trace, which costs about what a leaf op does.
const minLeafSplit = 4

// frame is one state of a worker's depth-first path whose ops are being
// tried: ops[next:] have not started, and an idle worker may take some.
type frame struct {
	trace []*agentv1.Request // from the root to the state
	self  string             // its root tuple
	depth int
	ops   []*agentv1.Request
	next  int
	// walk: a walk's state (Config.Walks): its ops are tried until one
	// leads on, and none is handed to another worker.
	walk bool
}

// offer hands ops not started yet to an idle worker when the queue is
// empty: half of those left at the shallowest state of the path that has
// enough (the shortest trace to replay, the largest subtrees). The
// innermost state keeps the op about to start. frames are the worker's,
// shallowest first; only it changes them.
func (s *search) offer(frames []*frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == 0 || len(s.queue) > 0 || s.halt != nil {
		return
	}
	for k, f := range frames {
		left := len(f.ops) - f.next
		if f.walk || left < 1 || (f.depth+1 >= s.cfg.Depth && left < minLeafSplit) {
			continue
		}
		keep := f.next + left/2
		if k == len(frames)-1 {
			keep = max(keep, f.next+1)
		}
		if keep >= len(f.ops) {
			continue
		}
		s.queue = append(s.queue, &item{prefix: slices.Clone(f.trace), depth: f.depth, key: f.self, ops: slices.Clone(f.ops[keep:])})
		f.ops = f.ops[:keep]
		s.wake.Signal()
		return
	}
}

// take waits for an item; nil when the search is over (nothing queued
// and nothing running) or halting.
func (s *search) take() *item {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.halt != nil {
			return nil
		}
		if len(s.queue) > 0 {
			it := s.queue[len(s.queue)-1]
			s.queue = s.queue[:len(s.queue)-1]
			s.busy++
			return it
		}
		if s.busy == 0 {
			return nil
		}
		s.idle++
		s.wake.Wait()
		s.idle--
	}
}

// done ends an item: err halts the search unless it is the worker's
// death and the item may run again (requeued, its marks taken back).
func (s *search) done(it *item, err error, retry bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	switch {
	case err == nil || errors.Is(err, errHalted):
	case retry:
		s.rollback(it)
		s.queue = append(s.queue, it)
	case s.halt == nil:
		s.halt = err
	}
	s.wake.Broadcast()
}

// stopAll halts the search with err (the first one wins).
func (s *search) stopAll(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.halt == nil {
		s.halt = err
	}
	s.wake.Broadcast()
}

// crashed records that op crashed the kernel at the state key.
func (s *search) crashed(key string, op *agentv1.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killers[key+"\x00"+opKey(op)] = true
}

// isCrashed reports whether op crashed the kernel at the state key: the
// search does not apply it there again.
func (s *search) isCrashed(key string, op *agentv1.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killers[key+"\x00"+opKey(op)]
}

// requeue ends an item whose worker died applying one of its ops: what
// it visited stays visited, and rest (the work of the worker's path not
// started yet, shallowest first) is queued, the deepest to be taken
// first.
func (s *search) requeue(rest []*item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	if s.halt == nil {
		s.queue = append(s.queue, rest...)
	}
	s.wake.Broadcast()
}

// describeItem names an item in errors.
func describeItem(it *item) string {
	return fmt.Sprintf("the %d ops at depth %d after %s", len(it.ops), len(it.prefix), strings.Join(opKinds(it.prefix), ","))
}
