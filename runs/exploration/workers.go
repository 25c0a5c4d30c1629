package exploration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/themisfs/themis/api"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/session"
	"go.uber.org/zap"
)

// MaxWorkers bounds Options.Workers.
const MaxWorkers = api.MaxWorkers

// AutoWorkerCount is the number of workers Options.Workers 0 means: one per CPU
// the process may use (GOMAXPROCS: the cgroup's CPU limit, in a
// container), at most 8; Run then takes no more than the session manager
// has room for.
func AutoWorkerCount() int { return max(1, min(runtime.GOMAXPROCS(0), 8)) }

// crew is the sessions and systems of one explore run. Worker 0's first
// session is the run's: it records the events and findings and names the
// run in the summary, even if its guest dies and is replaced.
type crew struct {
	m        *session.Manager
	create   session.CreateOptions
	revert   string
	timeMode agentv1.TimeMode
	policy   oracle.Policy
	dir      string // the fsck scratch dir, "" without Fsck and Crash
	crash    *crashRun
	quiet    bool // periodic writeback off in every session (--crash)
	setup    []*agentv1.Request

	ctx    context.Context // the search's: ends when any worker's run context does
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	runs    []*session.Run // every session acquired, replaced ones included, in order
	unwatch []func() bool  // per run: stop cancelling the search when its context ends
	systems []*system      // the current one of each worker
	every   []*system      // every system made, replaced ones included
}

// workerCount is how many workers to start for o: o.Workers (0:
// AutoWorkerCount), no more than the Manager has room for (at least 1:
// Acquire then says why there is none), and the reason, in words.
func workerCount(m *session.Manager, o Options) (int, string) {
	want, why := o.Workers, "asked"
	if want == 0 {
		want, why = AutoWorkerCount(), fmt.Sprintf("auto: %d CPUs", runtime.GOMAXPROCS(0))
	}
	if free := m.Free(o.MemoryMiB); free < want {
		return max(1, free), fmt.Sprintf("%s %d, room for %d sessions", why, want, free)
	}
	return want, why
}

// newCrew acquires n sessions for o at once (booting in parallel) and
// makes their systems; on error it ends the ones it got.
func newCrew(ctx context.Context, m *session.Manager, o Options, policy oracle.Policy, n int) (*crew, error) {
	c := &crew{m: m, create: session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Backend: o.Backend, Spares: o.Crash != nil, WarnNotFatal: o.WarnNotFinding, Image: o.Image},
		timeMode: o.TimeMode, policy: policy, setup: o.Setup}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	runs := make([]*session.Run, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i], errs[i] = m.Acquire(ctx, c.create, "explore")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, r := range runs {
			if r != nil {
				r.Close()
			}
		}
		return nil, err
	}
	c.revert = o.Revert
	if c.revert == "" || c.revert == RevertAuto {
		c.revert, _ = Revert(runs[0].Backend())
	}
	c.quiet = o.Crash != nil
	for _, r := range runs {
		if err := c.quieten(ctx, r); err != nil {
			for _, r := range runs {
				r.Close()
			}
			return nil, fmt.Errorf("explore: session %s: %w", r.ID(), err)
		}
		c.systems = append(c.systems, c.adopt(r))
	}
	for _, x := range c.systems {
		if err := c.populate(ctx, x); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// ErrSetup is the error of a run whose setup op (Options.Setup) failed on
// a lane: the filesystem refused it, the run did not start.
var ErrSetup = errors.New("explore: setup")

// populate applies the run's setup ops (Options.Setup) to x, before the
// search's root: each must succeed on every lane.
func (c *crew) populate(ctx context.Context, x *system) error {
	for i, op := range c.setup {
		res, err := x.applyOnPath(ctx, op, false) // a replacement's too: the setup is not under test
		if err != nil {
			return fmt.Errorf("explore: setup: op %d (%s) in session %s: %w", i+1, explore.OpKind(op), x.run.ID(), err)
		}
		for _, r := range res {
			if r.Errno != 0 {
				return fmt.Errorf("%w: op %d (%s) failed on lane %s: %s", ErrSetup, i+1, opspec.FormatTrace([]*agentv1.Request{op})[0], r.Lane, oracle.ErrnoText(uint32(r.Errno)))
			}
		}
	}
	return nil
}

// adopt makes r a worker's session: its context ending ends the search,
// and its system gets its own fsck image. c.mu is held or c is new.
func (c *crew) adopt(r *session.Run) *system {
	i := len(c.runs)
	c.runs = append(c.runs, r)
	c.unwatch = append(c.unwatch, context.AfterFunc(r.Context(), func() { c.cancel(context.Cause(r.Context())) }))
	x := newSystem(r, c.revert, c.timeMode, c.policy)
	if c.dir != "" {
		x.fsckImage = filepath.Join(c.dir, fmt.Sprintf("lane-%d.img", i))
	}
	x.crash = c.crash
	c.every = append(c.every, x)
	return x
}

// primary is the run's own session (worker 0's first).
func (c *crew) primary() *session.Run { return c.runs[0] }

// explorers are the current systems as explore.Systems.
func (c *crew) explorers() []explore.System {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]explore.System, len(c.systems))
	for i, x := range c.systems {
		out[i] = x
	}
	return out
}

// all are every system the run used, replaced ones included.
func (c *crew) all() []*system {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*system(nil), c.every...)
}

// setCrash gives every system, and every later one, the run's --crash
// state.
func (c *crew) setCrash(cr *crashRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crash = cr
	for _, x := range c.every {
		x.crash = cr
	}
}

// setFsckDir gives every system a fsck image in dir.
func (c *crew) setFsckDir(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dir = dir
	for i, x := range c.systems {
		x.fsckImage = filepath.Join(dir, fmt.Sprintf("lane-%d.img", i))
	}
}

// quieten turns r's periodic writeback off under --crash
// (crashcheck.QuietWriteback), before the search's first checkpoint.
func (c *crew) quieten(ctx context.Context, r *session.Run) error {
	if !c.quiet {
		return nil
	}
	return crashcheck.QuietWriteback(ctx, r)
}

// replace is explore's Workers.Replace: it ends the dead worker's session
// (failed) and acquires a fresh one.
func (c *crew) replace(ctx context.Context, i int, dead explore.System) (explore.System, error) {
	x, ok := dead.(*system)
	if !ok {
		return nil, fmt.Errorf("exploration: replace a %T", dead)
	}
	c.unwatchRun(x.run)
	why := "worker guest died"
	if x.kernel != nil {
		why = "worker guest's kernel crashed: " + x.kernel.Summary()
	}
	x.run.Event(context.WithoutCancel(ctx), "explore.worker.replaced", fmt.Sprintf("worker %d's %s; a new session takes its place", i, why), nil)
	if err := x.run.End(session.StateFailed, "explore: "+why); err != nil {
		x.run.Log().Warn("end a dead worker's session", zap.Error(err))
	}
	return c.successor(ctx, i)
}

// end ends every session but the primary with the run's reason (the
// primary's end is the caller's), and closes all of them.
func (c *crew) end(st session.State, reason string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, r := range c.runs[1:] {
		errs = append(errs, r.End(st, reason+" (a worker of "+c.runs[0].ID()+")"))
	}
	return errors.Join(errs...)
}

// close releases every session (Run.Close: a backstop after end).
func (c *crew) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.runs {
		c.unwatch[i]()
		r.Close()
	}
	c.cancel(nil)
}

// sessions are the ids of every session the run used, the primary first.
func (c *crew) sessions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.runs))
	for i, r := range c.runs {
		out[i] = r.ID()
	}
	return out
}
