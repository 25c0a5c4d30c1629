package explore

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// inMount says whether a walk goes on from the state key at depth in the
// mount its lanes are in (Config.MountSteps), drawn by the state's own
// random stream at that depth.
func (w *worker) inMount(key string, depth int) bool {
	return w.s.cfg.MountSteps && w.s.cfg.Walks > 0 && w.s.rng(mountKey(key, depth)).IntN(2) == 0
}

func mountKey(key string, depth int) string { return fmt.Sprintf("%s\x00mount\x00%d", key, depth) }

// mountStep goes on with a walk from the state self at depth (reached by
// trace; the System in it, in the mount of the op that led there): one op
// drawn there (the first of the state's shuffled draw that is this run's
// to try), marked to run in that mount (KeepMount), then the same from the
// state it leads to, new or not, until Depth or a divergence. Where a step
// leads to a state still to expand, the walk may instead (drawn) go on as
// walks do: a checkpoint there (a remount), then an op that leads on.
// There is no checkpoint to go back to in between, so the op drawn is the
// op taken.
func (w *worker) mountStep(ctx context.Context, it *item, depth int, trace []*agentv1.Request, self string) error {
	for depth < w.s.cfg.Depth {
		op, err := w.mountOp(ctx, self, depth)
		if err != nil || op == nil {
			return err
		}
		if err := w.s.step(ctx); err != nil {
			return err
		}
		child := appendStep(trace, op)
		key, st, results, err := w.apply(ctx, depth, trace, op, self)
		if err != nil {
			return w.stepDeath(err, self, op)
		}
		isNew, expand := w.s.seen(it, self, op, key, depth+1)
		if isNew {
			if err := w.visit(ctx, key, child, results, st); err != nil {
				return w.stepDeath(err, self, op)
			}
		}
		if divergent(st) {
			return nil
		}
		depth, trace, self = depth+1, child, key
		if expand && depth < w.s.cfg.Depth && !w.inMount(self, depth) {
			return w.descend(ctx, it, depth, trace, self)
		}
	}
	return nil
}

// mountOp is the op a mount step takes at the state self (nil: none of
// the ops drawn there is this run's to try), marked KeepMount.
func (w *worker) mountOp(ctx context.Context, self string, depth int) (*agentv1.Request, error) {
	ops, err := w.draw(ctx, self, w.s.cfg.Branching)
	if err != nil {
		return nil, err
	}
	w.s.rng(mountKey(self, depth)+"\x00op").Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	for _, op := range ops {
		if k := KeepMount(op); w.s.mine(self, k, depth) && !w.s.isCrashed(self, k) {
			return k, nil
		}
	}
	return nil, nil
}

// KeepMount is op (a copy) marked to run in the mount of the op before
// it (Request.keep_mount; of a burst, its first op: the rest follow the
// burst's own rule, SharesMount).
func KeepMount(op *agentv1.Request) *agentv1.Request {
	k := proto.Clone(op).(*agentv1.Request)
	if b := k.GetBatch(); b != nil && len(b.GetRequests()) > 0 {
		b.Requests[0].KeepMount = true
		return k
	}
	k.KeepMount = true
	return k
}
