package exploration

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/session"
)

// freshFunc is explore's Workers.Fresh for the run's revert. Under the
// remount revert a restore puts back the lanes' disks but leaves the
// guest's kernel as the last try left it (a try at minimizing a kernel
// finding that did not crash could still have left it in a state that
// crashes the next), so each try gets a new session (fresh). Under the
// machine revert the root checkpoint's restore puts back the whole
// machine, memory and devices too, as it was after boot: nil.
func (c *crew) freshFunc() func(ctx context.Context, i int, live explore.System) (explore.System, error) {
	if c.revert == RevertMachine {
		return nil
	}
	return c.fresh
}

// fresh is explore's Workers.Fresh: it ends worker i's live session
// (ended, not failed) and acquires a new one.
func (c *crew) fresh(ctx context.Context, i int, live explore.System) (explore.System, error) {
	x, ok := live.(*system)
	if !ok {
		return nil, fmt.Errorf("exploration: a fresh system for a %T", live)
	}
	c.unwatchRun(x.run)
	const why = "explore: a fresh guest takes its place for a try at minimizing a kernel finding"
	x.run.Event(context.WithoutCancel(ctx), "explore.minimize.fresh", fmt.Sprintf("worker %d: %s (its kernel is not reset by the remount revert)", i, why), nil)
	if err := x.run.End(session.StateEnded, why); err != nil {
		x.run.Log().Warn("end a worker's session for a fresh one", zap.Error(err))
	}
	return c.successor(ctx, i)
}

// unwatchRun stops r's context from ending the search: r is ending
// because its worker gets another session.
func (c *crew) unwatchRun(r *session.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for j, cr := range c.runs {
		if cr == r {
			c.unwatch[j]()
		}
	}
}

// successor acquires a new session for worker i and makes it the
// worker's system.
func (c *crew) successor(ctx context.Context, i int) (explore.System, error) {
	r, err := c.m.Acquire(ctx, c.create, "explore")
	if err != nil {
		return nil, err
	}
	if err := c.quieten(ctx, r); err != nil {
		r.Close()
		return nil, err
	}
	c.mu.Lock()
	nx := c.adopt(r)
	c.mu.Unlock()
	if err := c.populate(ctx, nx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.systems[i] = nx
	return nx, nil
}
