package exploration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/session"
)

// CrashOptions turn on explore --crash: every persistence op the search
// applies (fsync, fdatasync, sync) runs under a write log on every lane,
// and the crash states of what it wrote are checked on the host as
// runs/crashcheck does; each lane with a bad one is a crash finding whose
// setup is the search's path to the op (no sync after it).
type CrashOptions struct {
	// Crash bounds the states checked per lane and persistence op.
	Crash crash.Options
	// Strict makes a dirty or broken (the checker gave up on it) crash
	// state a finding on every lane; without it, one of a filesystem a
	// crash may leave for its fsck to repair (family.CrashRepaired) is
	// counted (CrashCounts.Repaired), not found: there a lost fsync and an
	// unmountable state are the findings.
	Strict bool
}

// CrashCounts is what --crash checked in a run.
type CrashCounts struct {
	// Points counts the persistence ops checked; Repeats those skipped
	// because the same path and op had been checked (a replay, another
	// worker); Unlogged those the log could not see whole (the lane's disk
	// held writes since its last checkpoint: a lazily skipped restore);
	// Failed the lanes not checked because the op failed there (a failed
	// fsync promises nothing).
	Points, Repeats, Unlogged, Failed int
	// States, NotClean, Durable and Lost add up every lane's states
	// (crashcheck.LaneSummary); Repaired counts the dirty states of lanes
	// whose filesystem a crash may leave for fsck to repair
	// (family.CrashRepaired): expected, not findings; Unnamed the states
	// that lost only a name the filesystem's fsync does not promise
	// (crashcheck.NameOnly).
	States, NotClean, Durable, Lost, Repaired, Unnamed int
	// Findings is the crash findings recorded.
	Findings int
	// Time is spent checking crash states.
	Time time.Duration
}

// crashRun is a run's --crash state, shared by its workers' systems.
type crashRun struct {
	opts  crash.Options
	specs []string
	fs    []string
	tools []hostfsck.Tool
	// repaired: a lane's dirty crash states are expected
	// (family.CrashRepaired).
	repaired []bool
	// record stores a crash finding (the run's recorder).
	record func(*session.Finding) error

	mu     sync.Mutex
	seen   map[string]bool // path and op keys checked
	counts CrashCounts
}

// validateCrash checks o.Crash: a host checker for every lane, the machine
// revert (auto means it then); the persistence ops join the op kinds when
// o.Ops is empty.
func validateCrash(o *Options, fs []string) error {
	if o.Crash == nil {
		return nil
	}
	if err := o.Crash.Crash.Check(); err != nil {
		return errkind.Invalid("crash", "%v", err)
	}
	switch o.Revert {
	case RevertRemount:
		return errkind.Invalid("revert", "--crash needs the machine revert: a crash state is of the disk since a checkpoint")
	case "", RevertAuto:
		o.Revert = RevertMachine
	}
	for i, f := range fs {
		t, err := hostfsck.For(f)
		if err == nil {
			err = t.Installed()
		}
		if err != nil {
			return errkind.Invalid(fmt.Sprintf("lanes[%d]", i), "--crash: %v", err)
		}
	}
	if len(o.Ops) == 0 {
		o.Ops = []string{explore.OpSetMetis, explore.OpSetPersistence}
	}
	return nil
}

// newCrashRun is o's --crash state (nil without it).
func newCrashRun(o Options, fs []string, record func(*session.Finding) error) (*crashRun, error) {
	if o.Crash == nil {
		return nil, nil
	}
	cr := &crashRun{opts: o.Crash.Crash, specs: o.Lanes, fs: fs, record: record, seen: map[string]bool{}}
	for _, f := range fs {
		t, err := hostfsck.For(f)
		if err != nil {
			return nil, fmt.Errorf("explore --crash: %w", err)
		}
		cr.tools = append(cr.tools, t)
		rep, _ := family.CrashRepaired(f)
		cr.repaired = append(cr.repaired, rep && !o.Crash.Strict)
	}
	return cr, nil
}

// claim marks path and op checked; false when they were already.
func (cr *crashRun) claim(path []*agentv1.Request, op *agentv1.Request) bool {
	key := pointKey(path, op)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.seen[key] {
		cr.counts.Repeats++
		return false
	}
	cr.seen[key] = true
	return true
}

// unclaim takes back claim's mark: the point was not checked.
func (cr *crashRun) unclaim(path []*agentv1.Request, op *agentv1.Request) {
	key := pointKey(path, op)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	delete(cr.seen, key)
}

// pointKey is a crash point's key: the path and the op.
func pointKey(path []*agentv1.Request, op *agentv1.Request) string {
	return strings.Join(opspec.FormatTrace(append(slices.Clone(path), op)), "\x00")
}

// add counts one lane's states of a point.
func (cr *crashRun) add(ls crashcheck.LaneSummary, d time.Duration, finding bool) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	c := &cr.counts
	c.States, c.NotClean, c.Durable, c.Lost, c.Time = c.States+ls.States, c.NotClean+ls.Dirty, c.Durable+ls.Durable, c.Lost+ls.Lost, c.Time+d
	c.Unnamed += ls.Unnamed
	if finding {
		c.Findings++
	}
}

func (cr *crashRun) count(f func(c *CrashCounts)) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	f(&cr.counts)
}

// Counts is a copy of the counts so far.
func (cr *crashRun) Counts() CrashCounts {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.counts
}

// findings is the crash findings recorded so far (0 without --crash):
// progress counts them with the search's, as the summary does.
func (cr *crashRun) findings() int {
	if cr == nil {
		return 0
	}
	return cr.Counts().Findings
}

// crashApply is Apply of a persistence op under --crash: the op under a
// write log on every lane, then each lane's crash states checked. A point
// already checked, or whose log cannot start, is applied plainly. A point
// whose op or check lost the guest is not checked: its claim goes, so
// that a replay of the path (a hung task's confirmation, minimization)
// checks it again.
func (x *system) crashApply(ctx context.Context, op *agentv1.Request) (_ []explore.LaneResult, err error) {
	path := slices.Clone(x.path)
	if !x.crash.claim(path, op) {
		return x.apply(ctx, op)
	}
	defer func() {
		if errors.Is(err, explore.ErrGuestDied) {
			x.crash.unclaim(path, op)
		}
	}()
	if logged, err := x.startLogs(ctx); err != nil || !logged {
		if err == nil {
			x.crash.count(func(c *CrashCounts) { c.Unlogged++ })
			return x.apply(ctx, op)
		}
		return nil, err
	}
	defer x.stopLogs(ctx)
	res, err := x.apply(ctx, op)
	if err != nil {
		return nil, err
	}
	x.crash.count(func(c *CrashCounts) { c.Points++ })
	t0 := time.Now()
	defer since(&x.t.check, t0)
	for i := range x.lanes {
		if i < len(res) && res[i].Errno != 0 {
			x.crash.count(func(c *CrashCounts) { c.Failed++ })
			continue
		}
		if err := x.crashLane(ctx, i, path, op); err != nil {
			return nil, fmt.Errorf("crash states of lane %s after %s: %w", x.lanes[i], explore.OpKind(op), err)
		}
	}
	return res, nil
}

// startLogs starts a write log on every lane; false (and none running)
// when a lane's disk has writes since its last checkpoint.
func (x *system) startLogs(ctx context.Context) (bool, error) {
	for i := range x.lanes {
		err := x.run.Disk(ctx, i, "start write log", func(d *overlay.Device) error { return d.StartLog() })
		if errors.Is(err, overlay.ErrLogNotEmpty) {
			x.stopLogs(ctx)
			return false, nil
		}
		if err != nil {
			return false, checked(err)
		}
	}
	return true, nil
}

// stopLogs ends every lane's write log (a lane gone is logged, not an
// error: the log goes with it).
func (x *system) stopLogs(ctx context.Context) {
	for i := range x.lanes {
		if err := x.run.Disk(context.WithoutCancel(ctx), i, "stop write log", func(d *overlay.Device) error { d.StopLog(); return nil }); err != nil {
			x.run.Log().Debug("stop write log: " + err.Error())
		}
	}
}

// crashLane checks lane i's crash states of op and records a finding when
// one is bad.
func (x *system) crashLane(ctx context.Context, i int, path []*agentv1.Request, op *agentv1.Request) error {
	t0 := time.Now()
	chk := crashcheck.LaneChecker{Index: i, Name: x.lanes[i], FS: x.crash.fs[i], Tool: x.crash.tools[i], Crash: x.crash.opts, Image: x.fsckImage,
		Mount: crashcheck.SpareMount(x.run, i)}
	var ls crashcheck.LaneSummary
	var bad []crashcheck.Result
	repaired := 0
	err := chk.Check(ctx, x.run, op, &ls, func(r crashcheck.Result) bool {
		switch {
		case x.crash.repaired[i] && (r.Verdict == crashcheck.Dirty || r.Verdict == crashcheck.Broken) && crashcheck.Class(r) == "not-clean":
			repaired++ // fsck repairs it, as the filesystem promises no more
		case crashcheck.Class(r) != "":
			bad = append(bad, r)
		}
		return false
	})
	if err != nil {
		return checked(err)
	}
	x.crash.add(ls, time.Since(t0), len(bad) > 0)
	x.crash.count(func(c *CrashCounts) { c.Repaired += repaired })
	if len(bad) == 0 {
		return nil
	}
	f, err := crashcheck.NewFinding(crashcheck.Of{Spec: x.crash.specs[i], FS: x.crash.fs[i], Setup: opspec.FormatTrace(path),
		Trace: opspec.FormatTrace([]*agentv1.Request{op}), Last: op, Result: crashcheck.Pick(bad), Lane: ls})
	if err != nil {
		return err
	}
	f.Detail += " (not minimized: the search's path)"
	return x.crash.record(f)
}

// laneFS is each lane's filesystem (an overlay lane's upper layer's).
func laneFS(specs []guest.LaneSpec) []string {
	out := make([]string, len(specs))
	for i, sp := range specs {
		out[i] = sp.Layer().FS
	}
	return out
}

// crashRecorder stores the run's crash findings from any worker: in the
// ledger, as an event, and to found.
func crashRecorder(ctx context.Context, run *session.Run, found func(session.Finding)) func(*session.Finding) error {
	var mu sync.Mutex
	return func(f *session.Finding) error {
		mu.Lock()
		defer mu.Unlock()
		if err := run.RecordFinding(ctx, f); err != nil {
			return err
		}
		run.Event(ctx, "finding", fmt.Sprintf("%s %s: %s", f.ID, f.Kind, f.Detail), nil)
		if found != nil {
			found(*f)
		}
		return nil
	}
}
