package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/internal/kreport"
)

// maxAttempts is how often workers may die without a kernel report
// running one item: past it the death is a finding ("guest-died") and the
// search ends, as with one worker without Replace. A death in applying an
// op with a kernel report is a finding at once, and the search goes on
// without that op there (skipStep).
const maxAttempts = 2

// guestDeath is a worker's System dying: where (the trace of the op, or
// the item's prefix) and with which results.
type guestDeath struct {
	trace []*agentv1.Request
	lanes []LaneResult
	err   error
	// report is the kernel's, when it left one (KernelCrash).
	report *kreport.Report
	// step is set when the guest died applying op at the state at (a root
	// tuple), or checking the state it led to; rest is then the work of
	// the worker's path not started yet (stepDeath).
	step bool
	at   string
	op   *agentv1.Request
	rest []*item
}

func (e *guestDeath) Error() string { return e.err.Error() }
func (e *guestDeath) Unwrap() error { return e.err }

// dead wraps err, a System error, when it is the guest dying.
func dead(err error, trace []*agentv1.Request, lanes []LaneResult) error {
	var gd *guestDeath
	if errors.Is(err, ErrGuestDied) && !errors.As(err, &gd) {
		gd = &guestDeath{trace: slices.Clone(trace), lanes: lanes, err: err}
		var kc *KernelCrash
		if errors.As(err, &kc) {
			r := kc.Report
			gd.report = &r
		}
		return gd
	}
	return err
}

// finding is the death's finding: "kernel" with the kernel's report, or
// "guest-died" with the System's error.
func (e *guestDeath) finding() Finding {
	if e.report == nil {
		return Finding{Kind: KindGuestDied, Trace: e.trace, Lanes: e.lanes, Detail: e.err.Error()}
	}
	return Finding{Kind: KindKernel, Trace: e.trace, Lanes: e.lanes, Kernel: e.report, Detail: kernelDetail(e.report, e.trace)}
}

// kernelDetail is a kernel finding's detail: the report's kind, the op
// that ran (the last of trace) and the report in one line.
func kernelDetail(r *kreport.Report, trace []*agentv1.Request) string {
	what := "the search"
	if n := len(trace); n > 0 {
		what = OpKind(trace[n-1])
	}
	return fmt.Sprintf("the kernel crashed (%s) running %s: %s", r.Kind, what, r.Summary())
}

// init takes the worker's root checkpoint and checks that its System
// starts where worker 0's did.
func (w *worker) init(ctx context.Context) error {
	root, err := w.sys.Checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("explore: worker %d: checkpoint root: %w", w.i, dead(err, nil, nil))
	}
	w.root, w.at = root, true
	st, err := w.sys.Fingerprint(ctx)
	if err != nil {
		return fmt.Errorf("explore: worker %d: fingerprint root: %w", w.i, dead(err, nil, nil))
	}
	if k := stateKey(st); k != w.s.rootKey {
		return fmt.Errorf("explore: worker %d starts in another state than worker 0: %s", w.i, describeRootChange(w.s.rootKey, st))
	}
	return nil
}

// loop runs items until the search is over. A death of its System puts
// the item back (at most maxAttempts times) and replaces the System.
func (w *worker) loop(ctx context.Context) {
	for {
		it := w.s.take()
		if it == nil {
			return
		}
		err := w.runItem(ctx, it)
		var gd *guestDeath
		if err == nil || errors.Is(err, errHalted) || !errors.As(err, &gd) {
			w.s.done(it, err, false)
			continue
		}
		if gd.step && gd.report != nil && w.s.replace != nil && ctx.Err() == nil {
			if !w.skipStep(ctx, it, gd) {
				return
			}
			continue
		}
		it.attempts++
		retry := w.s.replace != nil && it.attempts < maxAttempts && ctx.Err() == nil
		if retry {
			if rerr := w.replaceSystem(ctx); rerr != nil {
				err, retry = errors.Join(err, rerr), false
			}
		}
		if !retry {
			// A finding, not an error: the search ends with what it has.
			_ = w.s.add(gd.finding(), "", nil)
		}
		w.s.done(it, err, retry)
		if !retry {
			return
		}
	}
}

// skipStep makes a death in applying an op a finding and goes on without
// it: the op is recorded as killing the guest at its state (never applied
// there again), the finding added (reported at once), the System
// replaced, and the item done with what the worker's path had not started
// queued again; what the item visited stays visited. A hung task is a
// finding only once its hang recurs (hangRecurs); one that does not is
// counted (Result.UnconfirmedHangs) and the op stays applicable. It
// reports whether the worker goes on (false: the search halts,
// MaxFindings reached or no fresh System).
func (w *worker) skipStep(ctx context.Context, it *item, gd *guestDeath) bool {
	hang := gd.report.Kind == kreport.HungTask
	if !hang && !w.recordDeath(it, gd) {
		return false
	}
	if err := w.replaceSystem(ctx); err != nil {
		w.s.done(it, errors.Join(gd, err), false)
		return false
	}
	if hang {
		recurs, err := w.hangRecurs(ctx, gd.trace)
		switch {
		case err != nil && ctx.Err() == nil:
			w.s.done(it, errors.Join(gd, err), false)
			return false
		case recurs || err != nil: // a run that ends before the replay does keeps what it saw
			if !w.recordDeath(it, gd) {
				return false
			}
		default:
			w.s.count(func(r *Result) { r.UnconfirmedHangs++ })
		}
	}
	w.s.requeue(gd.rest)
	return true
}

// recordDeath records the op gd died of as killing the guest at its state
// and adds its finding; false (the item done) when the search halts.
func (w *worker) recordDeath(it *item, gd *guestDeath) bool {
	w.s.crashed(gd.at, gd.op)
	if err := w.s.add(gd.finding(), gd.at, gd.op); err != nil {
		w.s.done(it, err, false)
		return false
	}
	return true
}

// hangRecurs replays trace, which ended in a hung task report, on the
// worker's fresh System and reports whether the guest dies again. The
// detector reports a task that was not scheduled for 30 s
// (vmm.HungTaskTimeout): a deadlock, or a host that did not run the
// emulator that long (a loaded CI machine): only a deadlock recurs. A death
// of any kind confirms the hang; the System it killed is replaced.
func (w *worker) hangRecurs(ctx context.Context, trace []*agentv1.Request) (bool, error) {
	_, err := w.s.replay(ctx, w, trace)
	switch {
	case err == nil:
		return false, nil
	case !errors.Is(err, ErrGuestDied) || ctx.Err() != nil:
		return false, err
	}
	return true, w.replaceSystem(ctx)
}

// stepDeath marks err, when it is the guest dying, as the death of
// applying op at the state self (or of checking the state it led to):
// the work of the worker's path not started yet goes with it, for loop to
// queue again.
func (w *worker) stepDeath(err error, self string, op *agentv1.Request) error {
	var gd *guestDeath
	if errors.As(err, &gd) && !gd.step {
		gd.step, gd.at, gd.op, gd.rest = true, self, op, w.rest()
	}
	return err
}

// rest is the work of the worker's path not started yet: at each of its
// states, the ops after the one being tried, shallowest state first.
func (w *worker) rest() []*item {
	var out []*item
	for _, f := range w.frames {
		if f.next < len(f.ops) {
			out = append(out, &item{prefix: slices.Clone(f.trace), depth: f.depth, key: f.self, ops: slices.Clone(f.ops[f.next:])})
		}
	}
	return out
}

// replaceSystem swaps a dead System for a fresh one (Workers.Replace).
func (w *worker) replaceSystem(ctx context.Context) error {
	sys, err := w.s.replace(ctx, w.i, w.sys)
	if err != nil {
		return fmt.Errorf("explore: replace worker %d: %w", w.i, err)
	}
	w.sys = sys
	if err := w.init(ctx); err != nil {
		return err
	}
	w.fresh = true
	return nil
}

// runItem brings the System to the item's state (the root, or its prefix
// replayed from the root) and tries the item's ops there.
func (w *worker) runItem(ctx context.Context, it *item) error {
	cp := w.root
	w.fresh = false
	switch {
	case len(it.prefix) > 0:
		out, err := Replay(ctx, w.sys, w.root, it.prefix)
		w.s.count(func(r *Result) { r.Replays += len(it.prefix) })
		if err != nil {
			return dead(err, it.prefix, nil)
		}
		if k := stateKey(out.States); k != it.key {
			return w.s.add(Finding{Kind: KindReplay, Trace: it.prefix, Lanes: lastResults(out),
				Detail: "replayed from the root to run " + describeItem(it) + ", the trace reaches a different state than the search did: " + describeRootChange(it.key, out.States)}, "", nil)
		}
		if cp, err = w.sys.Checkpoint(ctx); err != nil {
			return fmt.Errorf("explore: checkpoint: %w", dead(err, it.prefix, nil))
		}
	case !w.at:
		if err := w.sys.Restore(ctx, w.root); err != nil {
			return fmt.Errorf("explore: restore root: %w", dead(err, nil, nil))
		}
	}
	w.at = false
	err := w.try(ctx, it, it.depth, it.prefix, it.ops, cp, it.key, w.s.cfg.Walks > 0 && it.depth > 0)
	if cp == w.root || errors.Is(err, ErrGuestDied) {
		return err
	}
	if derr := w.sys.Drop(ctx, cp); derr != nil {
		return errors.Join(err, fmt.Errorf("explore: drop checkpoint: %w", dead(derr, it.prefix, nil)))
	}
	return err
}

// expand tries the ops drawn for the state at depth (reached by trace,
// saved as checkpoint cp, root tuple self; the System is in that state).
func (w *worker) expand(ctx context.Context, it *item, depth int, trace []*agentv1.Request, cp CheckpointID, self string) error {
	if depth >= w.s.cfg.Depth {
		return nil
	}
	ops, err := w.draw(ctx, self, w.s.cfg.Branching)
	if err != nil {
		return err
	}
	walk := w.s.cfg.Walks > 0
	if walk {
		// A walk tries them in the state's own order until one leads on.
		w.s.rng(self+"\x00walk").Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	}
	return w.try(ctx, it, depth, trace, ops, cp, self, walk)
}

// draw is the n ops (as a rule: Generator.Draw) tried at the state self,
// the System in it. The generator is called by one worker at a time.
func (w *worker) draw(ctx context.Context, self string, n int) ([]*agentv1.Request, error) {
	if sg, ok := w.s.cfg.Generator.(StateAwareGenerator); ok {
		// Ops are drawn knowing what exists in the first lane, so that most
		// of them do something; the rest still probe the errno paths.
		leaves, err := w.sys.Leaves(ctx, w.s.lanes[0])
		if err != nil {
			return nil, fmt.Errorf("explore: leaves for the op draw: %w", dead(err, nil, nil))
		}
		w.s.genMu.Lock()
		defer w.s.genMu.Unlock()
		return sg.DrawAt(w.s.rng(self), n, leaves), nil
	}
	w.s.genMu.Lock()
	defer w.s.genMu.Unlock()
	return w.s.cfg.Generator.Draw(w.s.rng(self), n), nil
}

// try applies each of ops at the state cp holds and recurses into the
// children the search has not expanded yet. Before each op, an idle
// worker may take ops not started yet here or at a shallower state of
// the path (search.offer).
func (w *worker) try(ctx context.Context, it *item, depth int, trace []*agentv1.Request, ops []*agentv1.Request, cp CheckpointID, self string, walk bool) error {
	f := &frame{trace: trace, self: self, depth: depth, ops: ops, walk: walk}
	w.frames = append(w.frames, f)
	defer func() { w.frames = w.frames[:len(w.frames)-1] }()
	dirty := false // the System has moved past cp
	for i := 0; i < len(f.ops); i++ {
		f.next = i
		w.s.offer(w.frames)
		f.next = i + 1
		if !w.s.mine(self, f.ops[i], depth) || w.s.isCrashed(self, f.ops[i]) {
			continue
		}
		if err := w.s.step(ctx); err != nil {
			return err
		}
		if dirty {
			if err := w.sys.Restore(ctx, cp); err != nil {
				return fmt.Errorf("explore: restore: %w", dead(err, trace, nil))
			}
		}
		dirty = true
		child := appendStep(trace, f.ops[i])
		key, st, results, err := w.apply(ctx, depth, trace, f.ops[i], self)
		if err != nil {
			return w.stepDeath(err, self, f.ops[i])
		}
		if w.s.cfg.LazyRestore && key == self && allFailed(results) {
			// The op failed on every lane and left the abstract state as
			// it was: the next op runs from here without a restore.
			dirty = false
			w.s.count(func(r *Result) { r.RestoresSkipped++ })
		}
		isNew, expand := w.s.seen(it, self, f.ops[i], key, depth+1)
		if !expand {
			continue
		}
		if isNew {
			if err := w.visit(ctx, key, child, results, st); err != nil {
				return w.stepDeath(err, self, f.ops[i])
			}
		}
		if divergent(st) || depth+1 >= w.s.cfg.Depth {
			if walk {
				return nil // the walk ends here
			}
			continue // a divergence is reported by visit; nothing to compare below it
		}
		if w.inMount(key, depth+1) {
			err = w.mountStep(ctx, it, depth+1, child, key)
		} else {
			err = w.descend(ctx, it, depth+1, child, key)
		}
		if err != nil {
			return err
		}
		if walk {
			return nil // one step of a walk: the rest of it went on below
		}
	}
	return nil
}

// apply runs step (at depth+1, from the state self, reached by trace):
// its ops (Steps) in order, recording an errno divergence of each, then
// fingerprints the state it leads to. results are the last op's.
func (w *worker) apply(ctx context.Context, depth int, trace []*agentv1.Request, step *agentv1.Request, self string) (string, []LaneState, []LaneResult, error) {
	ops := Steps(step)
	child := appendStep(trace, step)
	var results []LaneResult
	for i, op := range ops {
		upTo := child[:len(trace)+i+1]
		var err error
		if results, err = w.sys.Apply(ctx, op); err != nil {
			return "", nil, nil, fmt.Errorf("explore: apply %s: %w", OpKind(op), dead(err, upTo, nil))
		}
		if err := w.s.checkLanes(results); err != nil {
			return "", nil, nil, err
		}
		if ErrnoFinding(w.s.cfg.Declared, op, results) {
			// The sighting's op is the step as far as this op (a burst's
			// first ops with it), so that its canonical trace ends here.
			at := step
			if len(ops) > 1 {
				at = &agentv1.Request{Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: ops[:i+1]}}}
			}
			if err := w.s.add(Finding{Kind: KindErrno, Trace: slices.Clip(upTo), Lanes: results, Detail: describeErrnos(op, results)}, self, at); err != nil {
				return "", nil, nil, err
			}
		} else if errnoDiverge(results) {
			w.s.count(func(r *Result) { r.DeclaredOps++ })
		}
	}
	w.s.applied(depth + 1)
	st, err := w.sys.Fingerprint(ctx)
	if err != nil {
		return "", nil, nil, fmt.Errorf("explore: fingerprint: %w", dead(err, child, results))
	}
	if err := w.s.checkStates(st); err != nil {
		return "", nil, nil, err
	}
	return stateKey(st), st, results, nil
}

// descend checkpoints the state child leads to, expands it and drops the
// checkpoint again (also when a stop ends the expansion).
func (w *worker) descend(ctx context.Context, it *item, depth int, child []*agentv1.Request, key string) error {
	childCP, err := w.sys.Checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("explore: checkpoint: %w", dead(err, child, nil))
	}
	err = w.expand(ctx, it, depth, child, childCP, key)
	if errors.Is(err, ErrGuestDied) {
		return err
	}
	if derr := w.sys.Drop(ctx, childCP); derr != nil {
		return errors.Join(err, fmt.Errorf("explore: drop checkpoint: %w", dead(derr, child, nil)))
	}
	return err
}

// visit runs the checks on a state reached for the first time (root
// tuple key); it returns after recording a finding when the lanes
// disagree. results are the lanes' errnos for the last op of trace (nil
// at the root).
func (w *worker) visit(ctx context.Context, key string, trace []*agentv1.Request, results []LaneResult, st []LaneState) error {
	if divergent(st) {
		f, err := localize(ctx, w.sys, w.s.cfg.TimeMode, st)
		if err != nil {
			return dead(err, trace, results)
		}
		f.Kind, f.Trace, f.Lanes = KindState, trace, results
		return w.s.add(f, key, nil)
	}
	if exactDivergent(st) {
		w.s.judged(key)
	}
	for i, check := range w.s.cfg.Checks {
		f, err := check(ctx, w.sys, trace)
		if err != nil {
			return fmt.Errorf("explore: check %d: %w", i, dead(err, trace, results))
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
			if err := w.s.add(g, key, nil); err != nil {
				return err
			}
		}
	}
	return nil
}
