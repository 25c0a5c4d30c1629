package exploration

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
)

// Run creates a session for o.Lanes, explores its state space with
// explore.Checker and ends the session. progress (optional) is called every
// few states and once at the end. found (optional) is called with every
// finding the moment the search finds it, already recorded in the ledger
// with its trace as found (Minimized false), and, for the kinds that can be
// replayed, once more with the same ID after the search, when delta
// debugging is done with it and the ledger holds the minimized trace
// (Minimized true, DuplicateOf set if it shrank to an earlier finding's
// trace). Both calls come from the goroutine running Run.
//
// A run stopped by a cancelled ctx keeps its findings (as found, not
// minimized) and returns its summary with Stopped "cancelled" and a nil
// error; so does a run whose guest died ("guest-died", the session failed).
// Bad options are a FieldError; other failures return an error and, when
// the run got that far, the partial summary.
//
// The session is busy while the run lasts: the other session methods refuse
// it with ErrState. It ends with reason "explore finished", "explore
// cancelled", ...
func Run(ctx context.Context, m *session.Manager, o Options, progress func(Progress), found func(session.Finding)) (_ *Summary, err error) {
	judged, err := validate(&o)
	if err != nil {
		return nil, err
	}
	policy := judged.Policy
	n, why := workerCount(m, o)
	c, err := newCrew(ctx, m, o, policy, n)
	if err != nil {
		return nil, err // "explore: session ...: ..." already (session.Acquire)
	}
	defer c.close()
	run := c.primary()
	ctx = c.ctx // ends on Delete of any worker's session and at the daemon's max run duration
	// Findings are kept whatever happens to the run.
	rec := &findingRecorder{run: run, ctx: context.WithoutCancel(ctx), specs: o.Lanes, revert: c.revert, policy: policy.Name, send: found, byID: make(map[int]*session.Finding),
		setup: opspec.FormatTrace(o.Setup)}
	cr, err := newCrashRun(o, laneFS(run.Specs()), crashRecorder(rec.ctx, run, found))
	if err != nil {
		return nil, errors.Join(err, c.end(session.StateEnded, "explore failed"), run.End(session.StateEnded, "explore failed: "+err.Error()))
	}
	c.setCrash(cr)
	cfg, cleanup, err := checkerConfig(o, c, rec)
	cfg.Declared = judged.Declared
	if err != nil {
		return nil, errors.Join(err, c.end(session.StateEnded, "explore failed"), run.End(session.StateEnded, "explore failed: fsck scratch dir"))
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	start := time.Now()
	if o.MaxDuration > 0 {
		cfg.Stop = func() bool { return time.Since(start) >= o.MaxDuration }
	}
	var tr trail
	cfg.Progress = func(p explore.Progress) {
		pr := progressOf(p, time.Since(start), c.all())
		pr.Findings += cr.findings()
		pr.Session = run.ID()
		tr.add(pr)
		if progress != nil {
			progress(pr)
		}
	}
	chk, err := explore.NewParallelChecker(explore.Workers{Systems: c.explorers(), Replace: c.replace, Fresh: c.freshFunc()}, cfg)
	if err != nil { // validate let through what explore refuses
		return nil, errors.Join(fmt.Errorf("explore: %w", err), c.end(session.StateEnded, "explore failed"), run.End(session.StateEnded, "explore failed: "+err.Error()))
	}
	run.Event(ctx, "explore.started", fmt.Sprintf(
		"depth %d, branching %d, %s, max states %d, seed %d, time mode %s, policy %s, remount %v, fsck %v, revert %s, setup %d ops, workers %d (%s): %s%s",
		o.Depth, o.Branching, describeOps(chk.Config()), o.MaxStates, o.Seed, o.TimeMode, policy.Name, o.Remount, o.Fsck, c.revert, len(o.Setup), n, why,
		strings.Join(c.sessions(), ","), describeShard(chk.Config().Shard)), nil)
	res, runErr := chk.Run(ctx)
	sum := summarize(run, c, res, time.Since(start))
	sum.Workers, sum.WorkersWhy = n, why
	sum.Policy, sum.Judged, sum.OpsLeftOut = policy.Name, judged.String(), judged.Excluded
	if sh := chk.Config().Shard; sh.Count > 1 {
		sum.Shard, sum.StateKeys, sum.StateDepths, sum.DeclaredKeys = sh, res.StateKeys, res.StateDepths, res.DeclaredKeys
	}
	if sum.Stopped == explore.StopCancelled && errors.Is(context.Cause(ctx), session.ErrRunTimeLimit) {
		sum.Stopped = StopMaxRunDuration
	}
	sum.Findings = rec.distinct()
	if cr != nil {
		counts := cr.Counts()
		sum.Crash, sum.Findings = &counts, sum.Findings+counts.Findings
	}
	saveRecord(ctx, run, o, sum, &tr)
	return sum, end(ctx, c, sum, res, runErr, rec.errs)
}

// checkerConfig is the Checker's configuration for o: the search bounds,
// the recorder's callbacks and the self-references o asks for, each run
// on whichever worker's system explore passes. cleanup removes the fsck
// scratch directory, if any.
func checkerConfig(o Options, c *crew, rec *findingRecorder) (explore.Config, func() error, error) {
	cfg := explore.Config{
		Depth: o.Depth, Branching: o.Branching, MaxStates: o.MaxStates, Seed: o.Seed, Ops: o.Ops,
		TimeMode: o.TimeMode, ProgressEvery: exploreProgressEvery, LazyRestore: o.LazyRestore,
		Found: rec.found, Minimized: rec.minimized, Shard: o.Shard, Walks: o.Walks,
		// Walks take mount steps where a checkpoint remounts and no check
		// remounts the lanes between a walk's ops (the remount and fsck
		// self-references do).
		MountSteps: o.Walks > 0 && c.revert == RevertRemount && !o.Remount && !o.Fsck,
	}
	cleanup := func() error { return nil }
	if o.Remount {
		cfg.Checks = append(cfg.Checks, onSystem((*system).remountCheck))
	}
	if o.Fsck || o.Crash != nil {
		// Owned (internal/scratch): a daemon that dies mid-run leaves it
		// to the next one's startup sweep.
		sd, err := scratch.MkdirTemp("", "themis-fsck-")
		if err != nil {
			return cfg, cleanup, fmt.Errorf("explore: fsck scratch dir: %w", err)
		}
		cleanup = func() error { return sd.Remove() }
		c.setFsckDir(sd.Path)
	}
	if o.Fsck {
		cfg.Checks = append(cfg.Checks, onSystem((*system).fsckCheck))
	}
	x := c.all()[0]
	for _, l := range x.lanes {
		if x.overlay[l] {
			cfg.Checks = append(cfg.Checks, onSystem(func(x *system, ctx context.Context, s explore.System, t []*agentv1.Request) (*explore.Finding, error) {
				return x.layersCheck(l)(ctx, s, t)
			}))
		}
	}
	// Last, so that after a remount check it sees the remounted lanes.
	cfg.Checks = append(cfg.Checks, onSystem((*system).unreadableCheck), onSystem((*system).sizeCheck))
	return cfg, cleanup, nil
}

// onSystem makes a check of the run's system a check of whichever
// worker's system explore passes it.
func onSystem(check func(x *system, ctx context.Context, s explore.System, trace []*agentv1.Request) (*explore.Finding, error)) explore.Check {
	return func(ctx context.Context, s explore.System, trace []*agentv1.Request) (*explore.Finding, error) {
		x, ok := s.(*system)
		if !ok {
			return nil, fmt.Errorf("exploration: a check given a %T, not a run's system", s)
		}
		return check(x, ctx, s, trace)
	}
}

// describeShard says which part of the search a shard is ("" for the
// whole search).
func describeShard(sh explore.Shard) string {
	if sh.Count <= 1 {
		return ""
	}
	return fmt.Sprintf(", shard %d/%d at depth %d", sh.Index, sh.Count, sh.Depth)
}

// describeOps says which op kinds every state tries and how many ops that
// makes per state: "ops create_file,...,symlink (14 per state)".
func describeOps(cfg explore.Config) string {
	g, ok := cfg.Generator.(*explore.MetisGenerator)
	if !ok {
		return fmt.Sprintf("ops of %T", cfg.Generator)
	}
	kinds := g.Kinds()
	return fmt.Sprintf("ops %s (%d per state)", strings.Join(kinds, ","), max(cfg.Branching, len(kinds)))
}

// summarize is the run's summary from the Checker's result (Findings left
// to the caller): the times and layer counts of every worker's systems.
func summarize(run *session.Run, c *crew, res *explore.Result, elapsed time.Duration) *Summary {
	sum := &Summary{
		Session: run.ID(), Sessions: c.sessions(), Revert: c.revert, States: res.States, Unique: res.Unique, Backend: run.Backend(), Image: run.Image(),
		Stopped: res.Stopped, Elapsed: elapsed, Boot: run.Boot(), MaxDepth: res.MaxDepthReached, UniqueByDepth: res.UniqueByDepth,
		Digest: hex.EncodeToString(res.Digest), Roots: make(map[string][]byte, len(res.Root)), RestoresSkipped: res.RestoresSkipped, UnconfirmedHangs: res.UnconfirmedHangs,
		DeclaredOps: res.DeclaredOps, DeclaredStates: res.DeclaredStates,
	}
	systems := c.all()
	sum.OpTime, sum.FingerprintTime, sum.RestoreTime, sum.CheckpointTime, sum.CheckTime = sumTimes(systems)
	sum.Profile = sumProfiles(systems)
	if sum.Stopped == explore.StopRequested {
		sum.Stopped = StopMaxDuration
	}
	if secs := elapsed.Seconds(); secs > 0 {
		sum.StatesPerSec = float64(res.States) / secs
	}
	for _, x := range systems {
		for l, seen := range x.layers {
			if sum.Layers == nil {
				sum.Layers = make(map[string]LayerCounts)
			}
			lc := sum.Layers[l]
			lc.Checked += seen.counts.Checked
			lc.Whiteouts += seen.counts.Whiteouts
			lc.Opaque += seen.counts.Opaque
			sum.Layers[l] = lc
		}
	}
	for _, r := range res.Root {
		sum.Roots[r.Lane] = r.Root
		if r.Below != nil {
			if sum.BelowRoots == nil {
				sum.BelowRoots = make(map[string][]byte)
			}
			sum.BelowRoots[r.Lane] = r.Below
		}
	}
	return sum
}

// end records the run's end and ends its session with a state and reason
// from how the search stopped; it returns the run's errors (runErr first,
// then the recorder's).
func end(ctx context.Context, c *crew, sum *Summary, res *explore.Result, runErr error, recErrs []error) error {
	run := c.primary()
	errs := recErrs
	st, reason := session.StateEnded, "explore finished"
	switch {
	case runErr != nil:
		reason = "explore failed: " + runErr.Error()
		errs = append([]error{fmt.Errorf("explore: session %s: %w", run.ID(), runErr)}, errs...)
	case res.Stopped == explore.StopCancelled:
		reason = "explore cancelled"
	case res.Stopped == explore.StopGuestDied:
		st, reason = session.StateFailed, "explore: guest died"
	case res.Stopped != "":
		reason = "explore finished (stopped: " + sum.Stopped + ")"
	}
	run.Event(context.WithoutCancel(ctx), "explore.finished", fmt.Sprintf(
		"%d states, %d unique, %d findings, %.1f states/s, stopped %q, %d workers", sum.States, sum.Unique, sum.Findings, sum.StatesPerSec, sum.Stopped, sum.Workers), nil)
	if err := errors.Join(c.end(st, reason), run.End(st, reason)); err != nil {
		if len(errs) == 0 {
			// The run itself is complete; a failure to stop its guest does
			// not undo it.
			run.Log().Warn("end explore session", zap.Error(err))
		} else {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
