package explore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/oracle"
)

// Finding kinds the Checker reports itself; Checks add their own
// ("self-reference:remount", "self-reference:fsck", ...).
const (
	KindErrno     = "errno-divergence"
	KindState     = "state-divergence"
	KindReplay    = "self-reference:replay"
	KindGuestDied = "guest-died"
	// KindKernel: the guest's kernel crashed (Finding.Kernel is its
	// report) running the trace's last op, or a check after it.
	KindKernel = "kernel"
)

// Stopped values of a Result.
const (
	StopDone      = ""          // the search covered its whole bounded space
	StopBudget    = "budget"    // Config.MaxStates reached
	StopRequested = "stopped"   // Config.Stop returned true
	StopCancelled = "cancelled" // the context was cancelled
	StopFindings  = "findings"  // Config.MaxFindings reached
	StopGuestDied = "guest-died"
)

// Finding is a property violation: a result of the search, not an error.
type Finding struct {
	// Kind is one of the Kind constants or a Check's own kind.
	Kind string
	// Trace leads from the root to the violation; its last op is the one
	// that exposed it.
	Trace []*agentv1.Request
	// Detail says what differs, in words.
	Detail string
	// Lanes holds every lane's errno for the last op of Trace.
	Lanes []LaneResult
	// Kernel is a "kernel" finding's report (nil for other kinds).
	Kernel *kreport.Report
	// Path is the first differing path of a state divergence ("" is the
	// lane root).
	Path string
	// Field names what differs at Path: "missing", "kind", "read_errno"
	// (the filesystem refused to read it on one side), "mode", "uid",
	// "gid", "nlink", "size", "content", "symlink_target", "atime",
	// "mtime", "ctime"; or "root" when the roots differ but the leaves
	// agree.
	Field string
	// Seed is the run's seed.
	Seed uint64
	// ID numbers the run's findings from 1 in the order found; it stays
	// the same from Config.Found to Config.Minimized.
	ID int
	// Minimized is true when Trace is the result of delta debugging (the
	// smallest reproducing subsequence found; Detail says so when the
	// budget ran out first); OriginalLen is the length of the trace as
	// found.
	Minimized   bool
	OriginalLen int
	// Found is the canonical trace before minimization (the least trace
	// reaching the finding's state, with its op); Merge compares shards'
	// findings by it. Set once the search has resolved its findings.
	Found []*agentv1.Request
	// DuplicateOf is the ID of an earlier finding of the same kind whose
	// minimized trace this one's equals (0: none). Result.Findings leaves
	// duplicates out; Config.Minimized reports them with it set.
	DuplicateOf int

	check int    // index into Config.Checks + 1, 0 for the Checker's own kinds
	sig   string // de-duplication key
}

// Result is the outcome of a run.
type Result struct {
	// States counts ops applied by the search (not by replays).
	States int
	// Unique counts distinct tuples of lane roots, the root state included.
	Unique int
	// MaxDepthReached is the depth of the deepest state applied.
	MaxDepthReached int
	// UniqueByDepth counts the unique states by the shallowest depth the
	// search reached each at: [0] is the root (1), its sum is Unique.
	UniqueByDepth []int
	// Findings are the distinct findings, in the order found.
	Findings []Finding
	// Duplicates are the findings left out of Findings after
	// minimization (DuplicateOf set), which Merge needs.
	Duplicates []Finding
	// Stopped says why the search ended early, StopDone if it did not.
	Stopped string
	// Replays counts ops applied by minimization and replay checks.
	Replays int
	// RestoresSkipped counts restores LazyRestore left out.
	RestoresSkipped int
	// UnconfirmedHangs counts hung task reports whose hang did not recur
	// when their trace was replayed on a fresh System: not findings.
	UnconfirmedHangs int
	// Root is the lanes' state before any op.
	Root []LaneState
	// Digest is sha256 over the sorted root tuples of the unique states:
	// equal digests mean the same set of states.
	Digest []byte
	// StateKeys are the unique states' root tuples, sorted (with
	// Config.KeepStates or a Shard; nil otherwise): what Merge unites.
	StateKeys []string
	// StateDepths are the shallowest depths of StateKeys, index by index.
	StateDepths []int
	// DeclaredOps counts applied ops whose lanes disagreed on errno only
	// as Config.Declared allows; DeclaredStates counts unique states whose
	// lanes agree under the run's canonicalization and differ without it
	// (LaneState.Exact). Neither is a finding; both say how much a
	// declared difference decided. DeclaredKeys are the latter's root
	// tuples, sorted (with StateKeys only), for Merge.
	DeclaredOps, DeclaredStates int
	DeclaredKeys                []string
}

// Checker runs a bounded search over one System, or over several in
// parallel (NewParallelChecker).
type Checker struct {
	workers Workers
	cfg     Config
}

// Workers are the Systems a parallel search drives, one goroutine each.
// Every System must start in the same state (the same lane roots).
type Workers struct {
	Systems []System
	// Replace returns a fresh System in the start state to take the place
	// of worker i's, whose guest died (dead is the old one, for the
	// caller to discard); the dead worker's item goes back to the pool.
	// Nil: a guest's death is a finding that ends the search.
	Replace func(ctx context.Context, i int, dead System) (System, error)
	// Fresh returns a fresh System in the start state to take the place
	// of worker i's live one (for the caller to discard), so that a try
	// at minimizing a "kernel" finding runs in a guest no op ran in
	// since it booted: for Systems whose Restore puts back the lanes but
	// not the whole machine (a kernel's state a try left behind could
	// crash the next). Nil: each try runs on the worker's System restored
	// to its root checkpoint, which must then reset the whole machine.
	Fresh func(ctx context.Context, i int, live System) (System, error)
}

// NewChecker checks cfg, fills in its defaults and returns a Checker over
// one System.
func NewChecker(sys System, cfg Config) (*Checker, error) {
	if sys == nil {
		return nil, errors.New("explore: nil System")
	}
	return NewParallelChecker(Workers{Systems: []System{sys}}, cfg)
}

// NewParallelChecker is NewChecker over several Systems. The search is
// the same whatever their number: for a deterministic System the unique
// states, the digest and the findings (by signature, with their canonical
// trace) do not depend on how many workers ran it or on their timing;
// only the States count does (a state reached deeper first is expanded
// again when reached shallower) and, when a budget or MaxFindings stops
// the search, what it covered.
func NewParallelChecker(w Workers, cfg Config) (*Checker, error) {
	if len(w.Systems) == 0 {
		return nil, errors.New("explore: no System")
	}
	for i, s := range w.Systems {
		if s == nil {
			return nil, fmt.Errorf("explore: nil System %d", i)
		}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Checker{workers: Workers{Systems: slices.Clone(w.Systems), Replace: w.Replace, Fresh: w.Fresh}, cfg: cfg}, nil
}

// Config returns the configuration with defaults filled in.
func (c *Checker) Config() Config { return c.cfg }

// stopError ends the search early for a reason that is not a failure.
type stopError struct{ reason string }

func (e *stopError) Error() string { return "explore: stopped: " + e.reason }

// Run searches the state space. The returned Result is never nil: a
// cancelled or failed run returns what it found so far, with Stopped saying
// why. A cancelled run and a run whose guest died leave their checkpoints
// behind for the caller to discard with the Systems; any other run drops
// every checkpoint it took.
func (c *Checker) Run(ctx context.Context) (*Result, error) {
	s := newSearch(c)
	s.replace, s.fresh = c.workers.Replace, c.workers.Fresh
	ws := make([]*worker, len(c.workers.Systems))
	for i, sys := range c.workers.Systems {
		ws[i] = &worker{s: s, i: i, sys: sys}
	}
	err := s.run(ctx, ws)
	res := s.result()
	var stop *stopError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		res.Stopped = StopCancelled
		return res, nil
	case errors.Is(err, ErrGuestDied):
		res.Stopped = StopGuestDied
		return res, nil
	case errors.As(err, &stop):
		res.Stopped = stop.reason
	default:
		return res, err
	}
	if ws[0].root == "" {
		return res, nil
	}
	if err := s.finish(ctx, ws); err != nil {
		res = s.result()
		if ctx.Err() != nil {
			res.Stopped = StopCancelled
			return res, nil
		}
		if errors.Is(err, ErrGuestDied) {
			res.Stopped = StopGuestDied
			return res, nil
		}
		return res, err
	}
	res = s.result()
	if stop != nil {
		res.Stopped = stop.reason
	}
	return res, nil
}

// run starts at the root on worker 0, then runs every worker until the
// search is over; it returns what halted it (nil: it covered everything).
func (s *search) run(ctx context.Context, ws []*worker) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	first, err := s.start(ctx, ws[0])
	if err != nil || first == nil {
		return err
	}
	s.queue = append(s.queue, first)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w.root == "" {
				if err := w.init(ctx); err != nil {
					s.stopAll(err)
					return
				}
			}
			w.loop(ctx)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Progress != nil {
		s.cfg.Progress(s.snapshot())
	}
	return s.halt
}

// start checkpoints and fingerprints the root on w, visits it and
// returns the item of its ops (nil: nothing to expand).
func (s *search) start(ctx context.Context, w *worker) (*item, error) {
	root, err := w.sys.Checkpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("explore: checkpoint root: %w", dead(err, nil, nil))
	}
	w.root, w.at = root, true
	st, err := w.sys.Fingerprint(ctx)
	if err != nil {
		return nil, fmt.Errorf("explore: fingerprint root: %w", dead(err, nil, nil))
	}
	if len(st) == 0 {
		return nil, errors.New("explore: the System has no lanes")
	}
	for _, l := range st {
		s.lanes = append(s.lanes, l.Lane)
	}
	s.res.Root, s.rootKey = st, stateKey(st)
	s.visited[s.rootKey] = 0
	root0 := &item{key: s.rootKey}
	if err := w.visit(ctx, s.rootKey, nil, nil, st); err != nil {
		return nil, err
	}
	if divergent(st) || s.cfg.Depth == 0 {
		return nil, nil // nothing to compare below a root the lanes disagree on
	}
	if root0.ops, err = w.draw(ctx, s.rootKey, max(s.cfg.Walks, s.cfg.Branching)); err != nil {
		return nil, err
	}
	return root0, nil
}

// result is the Result so far: the findings in the order first found,
// duplicates (after minimization) left out.
func (s *search) result() *Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.resolved {
		s.resolve()
	}
	res := s.res
	res.Unique = len(s.visited)
	res.UniqueByDepth = s.uniqueByDepth()
	res.DeclaredStates = len(s.declared)
	res.Digest = s.digest()
	if s.cfg.KeepStates || s.cfg.Shard.active() {
		res.StateKeys = s.sortedKeys()
		res.StateDepths = make([]int, len(res.StateKeys))
		for i, k := range res.StateKeys {
			res.StateDepths[i] = s.visited[k]
		}
		res.DeclaredKeys = sortedSet(s.declared)
	}
	res.Findings, res.Duplicates = nil, nil
	for _, f := range s.order {
		if f.DuplicateOf == 0 {
			res.Findings = append(res.Findings, *f)
		} else {
			res.Duplicates = append(res.Duplicates, *f)
		}
	}
	return &res
}

// finish runs the replay checks and minimizes the findings on worker 0,
// then drops every worker's root checkpoint.
func (s *search) finish(ctx context.Context, ws []*worker) error {
	w := ws[0]
	for _, smp := range s.samples() {
		out, err := s.replay(ctx, w, smp.trace)
		if err != nil {
			return err
		}
		if k := stateKey(out.States); k != smp.key {
			f := Finding{Kind: KindReplay, Trace: smp.trace, Lanes: lastResults(out),
				Detail: "replayed from the root, the trace reaches a different state than the search did: " + describeRootChange(smp.key, out.States)}
			_ = s.add(f, smp.key, nil) // MaxFindings no longer matters: the search is over
		}
	}
	s.mu.Lock()
	s.resolve()
	s.resolved = true
	s.mu.Unlock()
	if !s.cfg.NoMinimize {
		// In signature order, not the order found: which of two findings
		// that shrink to one trace is kept must not depend on who found
		// them first.
		byKey := slices.Clone(s.order)
		slices.SortStableFunc(byKey, func(a, b *Finding) int { return strings.Compare(a.sig, b.sig) })
		first := map[string]int{} // dedupe key -> ID of the first finding with it
		for _, f := range byKey {
			if !s.minimizable(f) {
				continue
			}
			if err := s.minimize(ctx, w, f); err != nil {
				return err
			}
			k := dedupeKey(f)
			if id, ok := first[k]; ok {
				f.DuplicateOf = id
			} else {
				first[k] = f.ID
			}
			if s.cfg.Minimized != nil {
				s.cfg.Minimized(*f)
			}
		}
	}
	for _, w := range ws {
		if w.root == "" {
			continue
		}
		if err := w.sys.Drop(ctx, w.root); err != nil {
			return fmt.Errorf("explore: worker %d: drop root checkpoint: %w", w.i, err)
		}
	}
	return nil
}

// sample is a state the replay check replays: its canonical trace and key.
type sample struct {
	trace []*agentv1.Request
	key   string
}

// samples are Config.ReplaySample states other than the root whose lanes
// agree, drawn with the seed from the set of states alone (those whose
// keyed hash is least), each with its canonical trace.
func (s *search) samples() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.cfg.ReplaySample
	if n <= 0 {
		return nil
	}
	type scored struct {
		h uint64
		sample
	}
	var all []scored
	var seed [8]byte
	binary.BigEndian.PutUint64(seed[:], s.cfg.Seed)
	for k, t := range s.canonical() {
		if len(t) == 0 || keyDivergent(k) {
			continue
		}
		h := fnv.New64a()
		h.Write(seed[:])
		h.Write([]byte(k))
		all = append(all, scored{h.Sum64(), sample{t, k}})
	}
	slices.SortFunc(all, func(a, b scored) int { return cmp.Or(cmp.Compare(a.h, b.h), strings.Compare(a.key, b.key)) })
	out := make([]sample, 0, min(n, len(all)))
	for _, a := range all[:min(n, len(all))] {
		out = append(out, a.sample)
	}
	return out
}

// keyDivergent reports whether the lanes' roots in a state key differ.
func keyDivergent(key string) bool {
	var first string
	for i := 0; len(key) >= 4; i++ {
		n := int(binary.BigEndian.Uint32([]byte(key[:4])))
		if n > len(key)-4 {
			return true // not a key stateKey made
		}
		root := key[4 : 4+n]
		if i == 0 {
			first = root
		} else if root != first {
			return true
		}
		key = key[4+n:]
	}
	return false
}

// stateKey is the visited-set key: the tuple of lane roots.
func stateKey(st []LaneState) string {
	var b []byte
	for _, s := range st {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.Root)))
		b = append(b, s.Root...)
	}
	return string(b)
}

// Signature is what groups findings that are most likely the same bug
// (the kind, the kind of the last op, what differs): Merge keeps one per
// signature, as a run does.
func (f Finding) Signature() string {
	if f.sig == "" {
		return signature(f)
	}
	return f.sig
}

// signature groups findings that are most likely the same bug: the kind,
// the kind of the last op, and what differs (the errno tuple or the field).
func signature(f Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d|", f.Kind, f.check)
	if n := len(f.Trace); n > 0 {
		b.WriteString(OpKind(f.Trace[n-1]))
	}
	switch f.Kind {
	case KindErrno:
		for _, l := range f.Lanes {
			fmt.Fprintf(&b, "|%d", l.Errno)
		}
	case KindState:
		b.WriteString("|" + f.Field)
	case KindReplay:
		b.WriteString("|" + strings.Join(opKinds(f.Trace), ","))
	case KindKernel:
		if f.Kernel != nil {
			b.WriteString("|" + f.Kernel.Signature())
		}
	default:
		b.WriteString("|" + f.Field)
	}
	return b.String()
}

func opKinds(trace []*agentv1.Request) []string {
	out := make([]string, len(trace))
	for i, op := range trace {
		out[i] = OpKind(op)
	}
	return out
}

func (s *search) checkLanes(results []LaneResult) error {
	if len(results) != len(s.lanes) {
		return fmt.Errorf("explore: apply returned %d lane results, want %d", len(results), len(s.lanes))
	}
	for i, l := range results {
		if l.Lane != s.lanes[i] {
			return fmt.Errorf("explore: apply returned lane %q at %d, want %q", l.Lane, i, s.lanes[i])
		}
	}
	return nil
}

func (s *search) checkStates(st []LaneState) error {
	if len(st) != len(s.lanes) {
		return fmt.Errorf("explore: fingerprint returned %d lanes, want %d", len(st), len(s.lanes))
	}
	for i, l := range st {
		if l.Lane != s.lanes[i] {
			return fmt.Errorf("explore: fingerprint returned lane %q at %d, want %q", l.Lane, i, s.lanes[i])
		}
	}
	return nil
}

// declaredOnly reports whether the lanes' errnos for op differ only as
// declared: every lane that gives its declared errno for the op's kind is
// set aside, and the others agree.
func declaredOnly(declared map[string]map[string]int32, op *agentv1.Request, results []LaneResult) bool {
	if declared == nil {
		return false
	}
	kind := OpKind(op)
	var rest []LaneResult
	excused := false
	for _, l := range results {
		if e, ok := declared[l.Lane][kind]; ok && e == l.Errno {
			excused = true
			continue
		}
		rest = append(rest, l)
	}
	return excused && (len(rest) < 2 || !errnoDiverge(rest))
}

// exactDivergent reports whether the lanes' exact roots (where the System
// computes them) differ.
func exactDivergent(st []LaneState) bool {
	for _, s := range st[1:] {
		if s.Exact != nil && st[0].Exact != nil && !bytes.Equal(s.Exact, st[0].Exact) {
			return true
		}
	}
	return false
}

// ErrnoFinding reports whether results, the lanes' errnos for op, are an
// errno divergence the search reports: the lanes disagree, and not only
// as the declared differences allow (Config.Declared; nil: none).
func ErrnoFinding(declared map[string]map[string]int32, op *agentv1.Request, results []LaneResult) bool {
	return errnoDiverge(results) && !declaredOnly(declared, op, results)
}

func errnoDiverge(results []LaneResult) bool {
	for _, l := range results[1:] {
		if l.Errno != results[0].Errno {
			return true
		}
	}
	return false
}

func divergent(st []LaneState) bool {
	for _, s := range st[1:] {
		if !bytes.Equal(s.Root, st[0].Root) {
			return true
		}
	}
	return false
}

func describeErrnos(op *agentv1.Request, results []LaneResult) string {
	parts := make([]string, len(results))
	for i, l := range results {
		parts[i] = fmt.Sprintf("%s=%d", l.Lane, l.Errno)
	}
	return fmt.Sprintf("%s: lanes disagree on errno: %s", OpKind(op), strings.Join(parts, " "))
}

func describeRootChange(key string, st []LaneState) string {
	var parts []string
	for _, s := range st {
		parts = append(parts, fmt.Sprintf("%s=%x", s.Lane, s.Root))
	}
	return "now " + strings.Join(parts, " ") + fmt.Sprintf(" (recorded key %x)", key)
}

// localize finds the first path and field where the first lane and the first
// lane that differs from it disagree.
func localize(ctx context.Context, sys System, mode agentv1.TimeMode, st []LaneState) (Finding, error) {
	j := 1
	for ; j < len(st) && bytes.Equal(st[j].Root, st[0].Root); j++ {
	}
	a, b := st[0].Lane, st[j].Lane
	la, err := sys.Leaves(ctx, a)
	if err != nil {
		return Finding{}, fmt.Errorf("explore: leaves of %s: %w", a, err)
	}
	lb, err := sys.Leaves(ctx, b)
	if err != nil {
		return Finding{}, fmt.Errorf("explore: leaves of %s: %w", b, err)
	}
	path, ok := oracle.FirstDiff(la, lb, mode)
	if !ok {
		return Finding{Field: "root", Detail: fmt.Sprintf("lanes %s and %s have different roots but equal leaves under %v (the System's roots and leaves disagree on time mode or policy)", a, b, mode)}, nil
	}
	ea, eb := find(la, path), find(lb, path)
	field, va, vb := FieldDiff(ea, eb, mode)
	shown := path
	if shown == "" {
		shown = "/"
	}
	return Finding{Path: path, Field: field, Detail: fmt.Sprintf("lanes %s and %s differ at %s: %s %s != %s", a, b, shown, field, va, vb)}, nil
}

// find returns the entry at path, or nil.
func find(entries []*agentv1.Entry, path string) *agentv1.Entry {
	for _, e := range entries {
		if e.GetPath() == path {
			return e
		}
	}
	return nil
}

// FieldDiff names the first field where a and b differ under mode, with both
// values in words; "missing" when one of them is nil, "" when they agree.
func FieldDiff(a, b *agentv1.Entry, mode agentv1.TimeMode) (field, va, vb string) {
	present := func(e *agentv1.Entry) string {
		if e == nil {
			return "absent"
		}
		return "present"
	}
	if a == nil || b == nil {
		if a == b {
			return "", "", ""
		}
		return "missing", present(a), present(b)
	}
	ts := func(t *agentv1.Timespec) string { return fmt.Sprintf("%d.%09d", t.GetSec(), t.GetNsec()) }
	type cmp struct {
		name   string
		va, vb string
	}
	cs := []cmp{
		{"kind", a.GetKind().String(), b.GetKind().String()},
		{"read_errno", oracle.ErrnoText(a.GetReadErrno()), oracle.ErrnoText(b.GetReadErrno())},
		{"mode", fmt.Sprintf("0%o", a.GetMode()), fmt.Sprintf("0%o", b.GetMode())},
		{"uid", fmt.Sprint(a.GetUid()), fmt.Sprint(b.GetUid())},
		{"gid", fmt.Sprint(a.GetGid()), fmt.Sprint(b.GetGid())},
		{"nlink", fmt.Sprint(a.GetNlink()), fmt.Sprint(b.GetNlink())},
		{"size", fmt.Sprint(a.GetSize()), fmt.Sprint(b.GetSize())},
		{"content", fmt.Sprintf("%x", a.GetContentHash()), fmt.Sprintf("%x", b.GetContentHash())},
		{"symlink_target", fmt.Sprintf("%q", a.GetSymlinkTarget()), fmt.Sprintf("%q", b.GetSymlinkTarget())},
	}
	switch mode {
	case agentv1.TimeMode_TIME_MODE_MTIME:
		cs = append(cs, cmp{"mtime", ts(a.GetMtime()), ts(b.GetMtime())})
	case agentv1.TimeMode_TIME_MODE_ALL:
		cs = append(cs, cmp{"atime", ts(a.GetAtime()), ts(b.GetAtime())},
			cmp{"mtime", ts(a.GetMtime()), ts(b.GetMtime())}, cmp{"ctime", ts(a.GetCtime()), ts(b.GetCtime())})
	}
	for _, c := range cs {
		if c.va != c.vb {
			return c.name, c.va, c.vb
		}
	}
	return "", "", ""
}

func lastResults(out *Outcome) []LaneResult {
	if out == nil || len(out.Results) == 0 {
		return nil
	}
	return out.Results[len(out.Results)-1]
}

// replay is Replay on w, counting the ops.
func (s *search) replay(ctx context.Context, w *worker, trace []*agentv1.Request) (*Outcome, error) {
	w.fresh = false
	out, err := Replay(ctx, w.sys, w.root, trace)
	s.count(func(r *Result) { r.Replays += len(trace) })
	return out, err
}

// reproduce replays trace and returns the finding of f's kind it shows, or
// nil.
func (s *search) reproduce(ctx context.Context, w *worker, f *Finding, trace []*agentv1.Request) (*Finding, error) {
	if f.Kind == KindKernel {
		return s.reproduceKernel(ctx, w, f, trace)
	}
	out, err := s.replay(ctx, w, trace)
	if err != nil {
		return nil, err
	}
	switch {
	case f.Kind == KindErrno:
		want := OpKind(f.Trace[len(f.Trace)-1])
		for i, res := range out.Results {
			if OpKind(trace[i]) == want && slices.Equal(res, f.Lanes) {
				g := *f
				g.Trace, g.Lanes, g.Detail = trace[:i+1], res, describeErrnos(trace[i], res)
				return &g, nil
			}
		}
		return nil, nil
	case f.Kind == KindState:
		if !divergent(out.States) {
			return nil, nil
		}
		loc, err := localize(ctx, w.sys, s.cfg.TimeMode, out.States)
		if err != nil {
			return nil, err
		}
		g := *f
		g.Trace, g.Lanes, g.Path, g.Field, g.Detail = trace, lastResults(out), loc.Path, loc.Field, loc.Detail
		return &g, nil
	case f.check > 0:
		h, err := s.cfg.Checks[f.check-1](ctx, w.sys, trace)
		if err != nil || h == nil || h.Kind != f.Kind {
			return nil, err
		}
		g := *h
		g.Trace, g.check, g.sig, g.Seed, g.OriginalLen = trace, f.check, f.sig, f.Seed, f.OriginalLen
		if g.Lanes == nil {
			g.Lanes = lastResults(out)
		}
		return &g, nil
	}
	return nil, nil
}

// minimizable reports whether f's kind can be replayed, so minimized: a
// "kernel" finding only where a System its try kills can be replaced.
func (s *search) minimizable(f *Finding) bool {
	switch {
	case len(f.Trace) == 0:
		return false
	case f.Kind == KindKernel:
		return f.Kernel != nil && s.replace != nil
	}
	return f.Kind == KindErrno || f.Kind == KindState || f.check > 0
}

// minimize shrinks f's trace in place when its kind can be replayed.
func (s *search) minimize(ctx context.Context, w *worker, f *Finding) error {
	if !s.minimizable(f) {
		return nil
	}
	var best *Finding
	fails := func(ctx context.Context, cand []*agentv1.Request) (bool, error) {
		g, err := s.reproduce(ctx, w, f, cand)
		if err != nil {
			return false, err
		}
		if g != nil && (best == nil || len(g.Trace) <= len(best.Trace)) {
			best = g
		}
		return g != nil, nil
	}
	_, err := Minimize(ctx, f.Trace, fails, s.cfg.MinimizeBudget)
	complete := err == nil
	if err != nil && !errors.Is(err, ErrBudget) {
		return fmt.Errorf("explore: minimize %s: %w", f.Kind, err)
	}
	if best == nil {
		// No proper subsequence reproduces: the trace is minimal as found,
		// provided it reproduces at all.
		g, err := s.reproduce(ctx, w, f, f.Trace)
		if err != nil {
			return fmt.Errorf("explore: minimize %s: %w", f.Kind, err)
		}
		if g == nil {
			f.Detail += " (did not reproduce when replayed from the root)"
			return nil
		}
		best = g
	}
	orig, id := f.OriginalLen, f.ID
	*f = *best
	f.OriginalLen, f.ID, f.Minimized = orig, id, true
	if !complete {
		f.Detail += fmt.Sprintf(" (minimization budget of %d replays ran out: the trace may not be 1-minimal)", s.cfg.MinimizeBudget)
	}
	return nil
}

// dedupeKey is what makes two minimized findings the same: their kind and
// trace. Different first sightings of one bug often shrink to one trace.
func dedupeKey(f *Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d", f.Kind, f.check)
	for _, op := range f.Trace {
		b.WriteString("|" + opKey(op))
	}
	return b.String()
}

// allFailed reports whether the op returned an errno on every lane.
func allFailed(results []LaneResult) bool {
	for _, l := range results {
		if l.Errno == 0 {
			return false
		}
	}
	return len(results) > 0
}
