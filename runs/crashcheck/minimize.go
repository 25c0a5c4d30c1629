package crashcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
)

// minimizeBudget bounds the traces one finding's minimization runs.
const minimizeBudget = 48

// minimize shrinks the trace of the first n findings (n < 0: none) by
// delta debugging over the ops before the last (the persistence point,
// always kept): a candidate holds when, run from the checkpoint, the lane
// still has a crash state of the finding's class. The finding is updated
// with the smallest trace and the state it picks there; one whose trace
// then repeats an earlier finding's (same lane spec and class) is marked
// its duplicate.
//
// A finding about a state whose check lost the guest is not minimized:
// each try would have to run in a fresh session, and could lose the guest
// again; it is not counted in n.
func (rc *recorder) minimize(ctx context.Context, t *tracer, n int) error {
	for k := range rc.found {
		if rc.found[k].death {
			continue
		}
		if n--; n < 0 {
			return nil
		}
		if err := rc.minimizeOne(ctx, t, &rc.found[k]); err != nil {
			return fmt.Errorf("minimize %s: %w", rc.found[k].f.ID, err)
		}
		rc.markDuplicate(k)
		if err := rc.run.UpdateFinding(rc.ctx, rc.found[k].f); err != nil {
			return err
		}
		f := rc.found[k].f
		rc.run.Event(rc.ctx, "finding.minimized", fmt.Sprintf("%s: %d ops as found, %d minimized", f.ID, f.OriginalLen, len(f.Trace)), nil)
		rc.emit(f)
	}
	return nil
}

// minimizeOne shrinks one finding's trace and sets its state from the
// shrunk trace's run.
func (rc *recorder) minimizeOne(ctx context.Context, t *tracer, fd *found) error {
	b := fd.bad
	class := Class(Pick(b.results))
	last := len(b.ops) - 1
	idx := make([]int, last)
	for i := range idx {
		idx[i] = i
	}
	fails := func(ctx context.Context, cand []int) (bool, error) {
		bad, _, err := t.reproduce(ctx, b.lane, opsAt(b.ops, cand, last), class, true)
		return len(bad) > 0, err
	}
	keep, err := explore.Minimize(ctx, idx, fails, minimizeBudget)
	if err != nil && !errors.Is(err, explore.ErrBudget) {
		return err
	}
	ops := opsAt(b.ops, keep, last)
	bad, ls, err := t.reproduce(ctx, b.lane, ops, class, false)
	if err != nil {
		return err
	}
	if len(bad) == 0 {
		fd.f.Detail += " (not minimized: the minimized trace did not repeat it on its last run)"
		return nil
	}
	setPoint(fd.f, Pick(bad), ls)
	fd.f.Trace, fd.f.Minimized = textAt(b.trace, keep, last), true
	return nil
}

// markDuplicate marks found k a duplicate of an earlier minimized finding
// with the same lane spec, class and trace.
func (rc *recorder) markDuplicate(k int) {
	f := rc.found[k].f
	for _, e := range rc.found[:k] {
		g := e.f
		if g.Minimized && g.DuplicateOf == "" && slices.Equal(g.LaneSpecs, f.LaneSpecs) && g.Signature == f.Signature && slices.Equal(g.Trace, f.Trace) {
			f.DuplicateOf = g.ID
			return
		}
	}
}

// opsAt is ops at the indices idx, then ops[last].
func opsAt(ops []*agentv1.Request, idx []int, last int) []*agentv1.Request {
	out := make([]*agentv1.Request, 0, len(idx)+1)
	for _, i := range idx {
		out = append(out, ops[i])
	}
	return append(out, ops[last])
}

func textAt(trace []string, idx []int, last int) []string {
	out := make([]string, 0, len(idx)+1)
	for _, i := range idx {
		out = append(out, trace[i])
	}
	return append(out, trace[last])
}

// reproduce runs ops from the checkpoint under a write log on lane i and
// checks its crash states: those of class (only the first when first),
// and the lane's counts.
func (t *tracer) reproduce(ctx context.Context, i int, ops []*agentv1.Request, class string, first bool) ([]Result, LaneSummary, error) {
	var ls LaneSummary
	if err := t.start(ctx, []int{i}); err != nil {
		return nil, ls, err
	}
	var err error
	if t.bounds, err = t.apply(ctx, ops); err != nil {
		return nil, ls, err
	}
	var bad []Result
	lane := t.run.Lanes()[i]
	err = t.laneCheck(i, ops).run(ctx, t.run, lane, ops[len(ops)-1], &ls, func(r Result) bool {
		if Class(r) == class {
			bad = append(bad, r)
		}
		return first && len(bad) > 0
	})
	return bad, ls, err
}
