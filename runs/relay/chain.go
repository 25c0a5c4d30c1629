package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/themisfs/themis/session"
)

// DefaultMaxDeaths is how many guests a Chain may lose before Live refuses
// to lease another: a guest that dies at every step is a broken guest, not
// a verdict per step, and each costs a boot (a hang, a call's bound).
const DefaultMaxDeaths = 8

// ErrTooManyDeaths is Live's error past the chain's MaxDeaths.
var ErrTooManyDeaths = errors.New("too many guest deaths")

// Chain is one run over a succession of sessions, each leased
// (session.Manager.Acquire) with the same options: when a guest dies
// (Lost), the next Live ends its session, failed with the death's
// summary, and leases a fresh one. The chain's Context lives across them:
// it ends with the caller's, when the current session is deleted, and at
// the first session's run duration limit. A Chain is used from one
// goroutine.
type Chain struct {
	// MaxDeaths bounds the guests lost (Acquire sets DefaultMaxDeaths).
	MaxDeaths int

	m      *session.Manager
	create session.CreateOptions
	kind   string

	ctx     context.Context
	cancel  context.CancelCauseFunc
	stop    context.CancelFunc
	cur     *session.Run
	unwatch func() bool
	dead    *Death // the current session's guest, lost; nil while it lives
	deaths  int
	ids     []string
}

// Acquire leases the chain's first session (session.Manager.Acquire with
// o, for a run of kind). The caller defers Close and ends the run with
// Finish.
func Acquire(ctx context.Context, m *session.Manager, o session.CreateOptions, kind string) (*Chain, error) {
	run, err := m.Acquire(ctx, o, kind)
	if err != nil {
		return nil, err
	}
	c := &Chain{MaxDeaths: DefaultMaxDeaths, m: m, create: o, kind: kind}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	c.stop = func() {}
	if dl, ok := run.Context().Deadline(); ok {
		c.ctx, c.stop = context.WithDeadlineCause(c.ctx, dl, fmt.Errorf("%w (the whole %s run, over its sessions)", session.ErrRunTimeLimit, kind))
	}
	c.adopt(run)
	return c, nil
}

// adopt makes run the current session: its context ending ends the chain's.
func (c *Chain) adopt(run *session.Run) {
	c.cur, c.dead = run, nil
	c.ids = append(c.ids, run.ID())
	c.unwatch = context.AfterFunc(run.Context(), func() { c.cancel(context.Cause(run.Context())) })
}

// Context is the run's context, across its sessions.
func (c *Chain) Context() context.Context { return c.ctx }

// Run is the current session's run, whether its guest lives or not.
func (c *Chain) Run() *session.Run { return c.cur }

// Sessions are the ids of every session the chain leased, in order.
func (c *Chain) Sessions() []string { return slices.Clone(c.ids) }

// Deaths is how many guests the chain lost.
func (c *Chain) Deaths() int { return c.deaths }

// Dead is the current guest's death, nil while it lives.
func (c *Chain) Dead() *Death { return c.dead }

// Lost records that the current session's guest died (d): the next Live
// replaces it.
func (c *Chain) Lost(d *Death) {
	if c.dead == nil {
		c.deaths++
	}
	c.dead = d
}

// Live is a session whose guest lives: the current one, or, after Lost, a
// fresh one (replaced true) that took the dead one's place; the dead
// one's session ends failed, its reason and an event naming the death.
// Past MaxDeaths it leases none: ErrTooManyDeaths.
func (c *Chain) Live() (run *session.Run, replaced bool, err error) {
	if c.dead == nil {
		return c.cur, false, nil
	}
	if c.deaths > c.MaxDeaths {
		return nil, false, fmt.Errorf("%s: the guest died %d times (at most %d): %w", c.kind, c.deaths, c.MaxDeaths, ErrTooManyDeaths)
	}
	old, d := c.cur, c.dead
	c.unwatch()
	why := fmt.Sprintf("%s: %s (%s)", c.kind, d.Verdict(), d.Summary())
	if err := old.End(session.StateFailed, why); err != nil { // first: its slot and memory go back
		old.Log().Warn("end a dead guest's session", zap.Error(err))
	}
	next, err := c.m.Acquire(c.ctx, c.create, c.kind)
	if err != nil {
		return nil, false, fmt.Errorf("a session in the place of %s, whose guest died: %w", old.ID(), err)
	}
	old.Event(context.WithoutCancel(c.ctx), c.kind+".guest.replaced", fmt.Sprintf("%s; session %s goes on", why, next.ID()), nil)
	next.Event(c.ctx, c.kind+".guest.continues", fmt.Sprintf("in the place of session %s, whose guest died (%s)", old.ID(), d.Verdict()), nil)
	c.adopt(next)
	return next, true, nil
}

// Finish ends the current session with runErr (session.Run.Finish), failed
// when its guest died and no session took its place.
func (c *Chain) Finish(runErr error) error {
	c.unwatch()
	if d := c.dead; d != nil {
		if err := c.cur.End(session.StateFailed, fmt.Sprintf("%s: %s (%s)", c.kind, d.Verdict(), d.Summary())); err != nil {
			c.cur.Log().Warn("end a dead guest's session", zap.Error(err))
		}
	}
	return c.cur.Finish(c.ctx, runErr)
}

// Close ends the current session if nothing has (session.Run.Close) and
// releases the chain's context.
func (c *Chain) Close() {
	c.unwatch()
	c.cur.Close()
	c.stop()
	c.cancel(nil)
}
