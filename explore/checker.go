package explore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/oracle"
)

// Finding kinds the Checker reports itself; Checks add their own
// ("self-reference:remount", "self-reference:fsck", ...).
const (
	KindErrno     = "errno-divergence"
	KindState     = "state-divergence"
	KindReplay    = "self-reference:replay"
	KindGuestDied = "guest-died"
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
	// Path is the first differing path of a state divergence ("" is the
	// lane root).
	Path string
	// Field names what differs at Path: "missing", "kind", "mode", "uid",
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
	// Findings are the distinct findings, in the order found.
	Findings []Finding
	// Stopped says why the search ended early, StopDone if it did not.
	Stopped string
	// Replays counts ops applied by minimization and replay checks.
	Replays int
	// RestoresSkipped counts restores LazyRestore left out.
	RestoresSkipped int
	// Root is the lanes' state before any op.
	Root []LaneState
	// Digest is sha256 over the roots of the unique states in the order the
	// search found them: equal digests mean the same sequence of states.
	Digest []byte
}

// Checker runs a bounded search over a System.
type Checker struct {
	sys System
	cfg Config
}

// NewChecker checks cfg, fills in its defaults and returns a Checker.
func NewChecker(sys System, cfg Config) (*Checker, error) {
	if sys == nil {
		return nil, errors.New("explore: nil System")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Checker{sys: sys, cfg: cfg}, nil
}

// Config returns the configuration with defaults filled in.
func (c *Checker) Config() Config { return c.cfg }

// stopError ends the search early for a reason that is not a failure.
type stopError struct{ reason string }

func (e *stopError) Error() string { return "explore: stopped: " + e.reason }

type sample struct {
	trace []*agentv1.Request
	key   string
}

// run is the state of one Run.
type run struct {
	*Checker
	res      Result
	root     CheckpointID
	lanes    []string
	visited  map[string]int // root tuple -> shallowest depth seen
	digest   []byte
	sigs     map[string]bool
	samples  []sample
	seen     int // unique states offered to the sample reservoir
	sampler  *rand.Rand
	progress int // States at the last Progress call
	depth    int // depth of the state last visited
}

// Run searches the state space. The returned Result is never nil: a
// cancelled or failed run returns what it found so far, with Stopped saying
// why. A cancelled run and a run whose guest died leave their checkpoints
// behind for the caller to discard with the System; any other run drops
// every checkpoint it took.
func (c *Checker) Run(ctx context.Context) (*Result, error) {
	r := &run{
		Checker: c,
		visited: map[string]int{},
		sigs:    map[string]bool{},
		sampler: rand.New(rand.NewPCG(c.cfg.Seed, 0x7265706c6179)), // "replay"
	}
	err := r.search(ctx)
	r.res.Digest = r.digest
	if r.cfg.Progress != nil {
		r.cfg.Progress(r.snapshot())
	}
	var stop *stopError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		r.res.Stopped = StopCancelled
		return &r.res, nil
	case errors.Is(err, ErrGuestDied):
		r.res.Stopped = StopGuestDied
		return &r.res, nil
	case errors.As(err, &stop):
		r.res.Stopped = stop.reason
	default:
		return &r.res, err
	}
	if r.root == "" {
		return &r.res, nil
	}
	if err := r.finish(ctx); err != nil {
		if ctx.Err() != nil {
			r.res.Stopped = StopCancelled
			return &r.res, nil
		}
		if errors.Is(err, ErrGuestDied) {
			r.res.Stopped = StopGuestDied
			return &r.res, nil
		}
		return &r.res, err
	}
	return &r.res, nil
}

// finish runs the replay checks, minimizes the findings and drops the root
// checkpoint.
func (r *run) finish(ctx context.Context) error {
	for _, s := range r.samples {
		out, err := r.replay(ctx, s.trace)
		if err != nil {
			return err
		}
		if k := stateKey(out.States); k != s.key {
			f := Finding{Kind: KindReplay, Trace: s.trace, Lanes: lastResults(out),
				Detail: "replayed from the root, the trace reaches a different state than the search did: " + describeRootChange(s.key, out.States)}
			_ = r.add(f) // MaxFindings no longer matters: the search is over
		}
	}
	if !r.cfg.NoMinimize {
		first := map[string]int{} // dedupe key -> ID of the first finding with it
		for i := range r.res.Findings {
			f := &r.res.Findings[i]
			if !minimizable(f) {
				continue
			}
			if err := r.minimize(ctx, f); err != nil {
				return err
			}
			k := dedupeKey(f)
			if id, ok := first[k]; ok {
				f.DuplicateOf = id
			} else {
				first[k] = f.ID
			}
			if r.cfg.Minimized != nil {
				r.cfg.Minimized(*f)
			}
		}
		r.res.Findings = slices.DeleteFunc(r.res.Findings, func(f Finding) bool { return f.DuplicateOf != 0 })
	}
	if err := r.sys.Drop(ctx, r.root); err != nil {
		return fmt.Errorf("explore: drop root checkpoint: %w", err)
	}
	return nil
}

func (r *run) snapshot() Progress {
	return Progress{States: r.res.States, Unique: r.res.Unique, Depth: r.depth, MaxDepth: r.res.MaxDepthReached, Findings: len(r.res.Findings)}
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

// rng returns the generator for the state at pos (child ordinals from the
// root): reproducible from the seed and the position alone.
func (r *run) rng(pos []int) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	for _, p := range pos {
		binary.BigEndian.PutUint64(b[:], uint64(p))
		h.Write(b[:])
	}
	return rand.New(rand.NewPCG(r.cfg.Seed, h.Sum64()))
}

func (r *run) search(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	root, err := r.sys.Checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("explore: checkpoint root: %w", err)
	}
	r.root = root
	st, err := r.sys.Fingerprint(ctx)
	if err != nil {
		return fmt.Errorf("explore: fingerprint root: %w", err)
	}
	if len(st) == 0 {
		return errors.New("explore: the System has no lanes")
	}
	for _, s := range st {
		r.lanes = append(r.lanes, s.Lane)
	}
	r.res.Root = st
	if err := r.visit(ctx, nil, nil, st, 0); err != nil {
		return err
	}
	if divergent(st) {
		return nil // nothing to compare below a root the lanes disagree on
	}
	return r.expand(ctx, 0, nil, nil, root, stateKey(st))
}

// visit records a state reached for the first time and runs the checks on
// it; it returns after recording a finding when the lanes disagree. results
// are the lanes' errnos for the last op of trace (nil at the root): the
// findings made here carry them from the moment they are reported.
func (r *run) visit(ctx context.Context, trace []*agentv1.Request, results []LaneResult, st []LaneState, depth int) error {
	key := stateKey(st)
	r.visited[key] = depth
	r.res.Unique++
	sum := sha256.Sum256(append(append([]byte(nil), r.digest...), key...))
	r.digest = sum[:]
	if divergent(st) {
		f, err := r.localize(ctx, st)
		if err != nil {
			return err
		}
		f.Kind, f.Trace, f.Lanes = KindState, trace, results
		return r.add(f)
	}
	if n := r.cfg.ReplaySample; n > 0 && len(trace) > 0 {
		// Reservoir sampling, seeded: every state has the same chance.
		r.seen++
		if len(r.samples) < n {
			r.samples = append(r.samples, sample{trace, key})
		} else if j := r.sampler.IntN(r.seen); j < n {
			r.samples[j] = sample{trace, key}
		}
	}
	for i, check := range r.cfg.Checks {
		f, err := check(ctx, r.sys, trace)
		if err != nil {
			return fmt.Errorf("explore: check %d: %w", i, err)
		}
		if f != nil {
			g := *f
			g.check = i + 1
			if g.Trace == nil {
				g.Trace = trace
			}
			if g.Lanes == nil {
				g.Lanes = results
			}
			if err := r.add(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// add records a finding unless one with the same signature exists, and
// reports it to Config.Found at once.
func (r *run) add(f Finding) error {
	f.Seed = r.cfg.Seed
	f.OriginalLen = len(f.Trace)
	f.sig = signature(f)
	if r.sigs[f.sig] {
		return nil
	}
	r.sigs[f.sig] = true
	f.ID = len(r.sigs)
	r.res.Findings = append(r.res.Findings, f)
	if r.cfg.Found != nil {
		r.cfg.Found(f)
	}
	if r.cfg.MaxFindings > 0 && len(r.res.Findings) >= r.cfg.MaxFindings {
		return &stopError{StopFindings}
	}
	return nil
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

// step is called before every op: it enforces budgets and reports progress.
func (r *run) step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.cfg.MaxStates > 0 && r.res.States >= r.cfg.MaxStates {
		return &stopError{StopBudget}
	}
	if r.cfg.Stop != nil && r.cfg.Stop() {
		return &stopError{StopRequested}
	}
	if r.cfg.Progress != nil && r.res.States-r.progress >= r.cfg.ProgressEvery {
		r.progress = r.res.States
		r.cfg.Progress(r.snapshot())
	}
	return nil
}

// expand tries the ops drawn for the state at depth (reached by trace, at
// position pos, saved as checkpoint cp; the System is in that state).
func (r *run) expand(ctx context.Context, depth int, pos []int, trace []*agentv1.Request, cp CheckpointID, self string) error {
	if depth >= r.cfg.Depth {
		return nil
	}
	var ops []*agentv1.Request
	if sg, ok := r.cfg.Generator.(StateAwareGenerator); ok {
		// Ops are drawn knowing what exists in the first lane, so that most
		// of them do something; the rest still probe the errno paths.
		leaves, err := r.sys.Leaves(ctx, r.lanes[0])
		if err != nil {
			return fmt.Errorf("explore: leaves for the op draw: %w", err)
		}
		ops = sg.DrawAt(r.rng(pos), r.cfg.Branching, leaves)
	} else {
		ops = r.cfg.Generator.Draw(r.rng(pos), r.cfg.Branching)
	}
	dirty := false // the System has moved past cp
	for i, op := range ops {
		if err := r.step(ctx); err != nil {
			return err
		}
		if dirty {
			if err := r.sys.Restore(ctx, cp); err != nil {
				return fmt.Errorf("explore: restore: %w", err)
			}
		}
		dirty = true
		child := append(slices.Clip(trace), op)
		r.depth = depth + 1
		r.res.MaxDepthReached = max(r.res.MaxDepthReached, depth+1)
		results, err := r.sys.Apply(ctx, op)
		if errors.Is(err, ErrGuestDied) {
			_ = r.add(Finding{Kind: KindGuestDied, Trace: child, Detail: err.Error()})
			return err
		}
		if err != nil {
			return fmt.Errorf("explore: apply %s: %w", OpKind(op), err)
		}
		r.res.States++
		if err := r.checkLanes(results); err != nil {
			return err
		}
		if errnoDiverge(results) {
			if err := r.add(Finding{Kind: KindErrno, Trace: child, Lanes: results, Detail: describeErrnos(op, results)}); err != nil {
				return err
			}
		}
		st, err := r.sys.Fingerprint(ctx)
		if errors.Is(err, ErrGuestDied) {
			_ = r.add(Finding{Kind: KindGuestDied, Trace: child, Lanes: results, Detail: err.Error()})
			return err
		}
		if err != nil {
			return fmt.Errorf("explore: fingerprint: %w", err)
		}
		if err := r.checkStates(st); err != nil {
			return err
		}
		key := stateKey(st)
		if r.cfg.LazyRestore && key == self && allFailed(results) {
			// The op failed on every lane and left the abstract state as
			// it was: the next op runs from here without a restore.
			dirty = false
			r.res.RestoresSkipped++
		}
		d, seen := r.visited[key]
		if seen && d <= depth+1 {
			continue
		}
		if !seen {
			if err := r.visit(ctx, child, results, st, depth+1); err != nil {
				return err
			}
		}
		if divergent(st) {
			continue // reported by visit; nothing to compare below it
		}
		r.visited[key] = depth + 1
		if depth+1 >= r.cfg.Depth {
			continue
		}
		childCP, err := r.sys.Checkpoint(ctx)
		if err != nil {
			return fmt.Errorf("explore: checkpoint: %w", err)
		}
		err = r.expand(ctx, depth+1, append(slices.Clip(pos), i), child, childCP, key)
		var stop *stopError
		if err != nil && !errors.As(err, &stop) {
			return err
		}
		if derr := r.sys.Drop(ctx, childCP); derr != nil {
			return fmt.Errorf("explore: drop checkpoint: %w", derr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *run) checkLanes(results []LaneResult) error {
	if len(results) != len(r.lanes) {
		return fmt.Errorf("explore: apply returned %d lane results, want %d", len(results), len(r.lanes))
	}
	for i, l := range results {
		if l.Lane != r.lanes[i] {
			return fmt.Errorf("explore: apply returned lane %q at %d, want %q", l.Lane, i, r.lanes[i])
		}
	}
	return nil
}

func (r *run) checkStates(st []LaneState) error {
	if len(st) != len(r.lanes) {
		return fmt.Errorf("explore: fingerprint returned %d lanes, want %d", len(st), len(r.lanes))
	}
	for i, s := range st {
		if s.Lane != r.lanes[i] {
			return fmt.Errorf("explore: fingerprint returned lane %q at %d, want %q", s.Lane, i, r.lanes[i])
		}
	}
	return nil
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
func (r *run) localize(ctx context.Context, st []LaneState) (Finding, error) {
	j := 1
	for ; j < len(st) && bytes.Equal(st[j].Root, st[0].Root); j++ {
	}
	a, b := st[0].Lane, st[j].Lane
	la, err := r.sys.Leaves(ctx, a)
	if err != nil {
		return Finding{}, fmt.Errorf("explore: leaves of %s: %w", a, err)
	}
	lb, err := r.sys.Leaves(ctx, b)
	if err != nil {
		return Finding{}, fmt.Errorf("explore: leaves of %s: %w", b, err)
	}
	path, ok := oracle.FirstDiff(la, lb, r.cfg.TimeMode)
	if !ok {
		return Finding{Field: "root", Detail: fmt.Sprintf("lanes %s and %s have different roots but equal leaves under %v (the System's roots and leaves disagree on time mode or policy)", a, b, r.cfg.TimeMode)}, nil
	}
	ea, eb := find(la, path), find(lb, path)
	field, va, vb := FieldDiff(ea, eb, r.cfg.TimeMode)
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

// replay is Replay, counting the ops.
func (r *run) replay(ctx context.Context, trace []*agentv1.Request) (*Outcome, error) {
	out, err := Replay(ctx, r.sys, r.root, trace)
	r.res.Replays += len(trace)
	return out, err
}

// reproduce replays trace and returns the finding of f's kind it shows, or
// nil.
func (r *run) reproduce(ctx context.Context, f *Finding, trace []*agentv1.Request) (*Finding, error) {
	out, err := r.replay(ctx, trace)
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
		loc, err := r.localize(ctx, out.States)
		if err != nil {
			return nil, err
		}
		g := *f
		g.Trace, g.Lanes, g.Path, g.Field, g.Detail = trace, lastResults(out), loc.Path, loc.Field, loc.Detail
		return &g, nil
	case f.check > 0:
		h, err := r.cfg.Checks[f.check-1](ctx, r.sys, trace)
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

// minimizable reports whether f's kind can be replayed, so minimized.
func minimizable(f *Finding) bool {
	return (f.Kind == KindErrno || f.Kind == KindState || f.check > 0) && len(f.Trace) > 0
}

// minimize shrinks f's trace in place when its kind can be replayed.
func (r *run) minimize(ctx context.Context, f *Finding) error {
	if !minimizable(f) {
		return nil
	}
	var best *Finding
	fails := func(ctx context.Context, cand []*agentv1.Request) (bool, error) {
		g, err := r.reproduce(ctx, f, cand)
		if err != nil {
			return false, err
		}
		if g != nil && (best == nil || len(g.Trace) <= len(best.Trace)) {
			best = g
		}
		return g != nil, nil
	}
	_, err := Minimize(ctx, f.Trace, fails, r.cfg.MinimizeBudget)
	complete := err == nil
	if err != nil && !errors.Is(err, ErrBudget) {
		return fmt.Errorf("explore: minimize %s: %w", f.Kind, err)
	}
	if best == nil {
		// No proper subsequence reproduces: the trace is minimal as found,
		// provided it reproduces at all.
		g, err := r.reproduce(ctx, f, f.Trace)
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
		f.Detail += fmt.Sprintf(" (minimization budget of %d replays ran out: the trace may not be 1-minimal)", r.cfg.MinimizeBudget)
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
