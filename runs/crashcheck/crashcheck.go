package crashcheck

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/hostfsck"
	"github.com/themisfs/themis/session"
)

// MaxTraceOps bounds Options.Setup and Options.Trace.
const MaxTraceOps = 64

// Options are the inputs of Run.
type Options struct {
	// Lanes are lane specs, as for Create (a host fsck must exist for
	// each: runs/hostfsck).
	Lanes []string
	// Setup runs before the checkpoint, then a sync: the log's start,
	// taken as durable.
	Setup []string
	// Trace runs with the write log on; it should end in a persistence
	// op (fsync, fdatasync, sync).
	Trace []string
	// Crash bounds the states checked per lane.
	Crash crash.Options
	// MemoryMiB is guest RAM (default 128).
	MemoryMiB int
}

// Verdicts of a Result.
const (
	Clean  = "clean"
	Dirty  = "dirty"
	Broken = "broken" // fsck could not read it (no superblock, ...)
)

// Result is one crash state of one lane, checked.
type Result struct {
	Lane    string
	Index   int // of the lane's states, in crash.Enumerate's order
	State   crash.State
	Verdict string
	// Output is the fsck's (and the journal replay's) output, cut to
	// hostfsck.MaxOutput, for a state that is not clean.
	Output string
}

// LaneSummary is one lane's log and states.
type LaneSummary struct {
	Writes, Flushes int
	States, Dirty   int // checked, and not clean (dirty or broken)
	Truncated       bool
	Replay          string // the host's journal replay step, or why none
}

// Summary is a run's outcome.
type Summary struct {
	Session string
	Lanes   map[string]*LaneSummary
	Elapsed time.Duration
	// StatesPerSec is the crash states checked per second of checking.
	StatesPerSec float64
}

// Run checks o's crash states in a session of its own; emit (optional)
// gets each result as it is made. Bad options are a FieldError.
func Run(ctx context.Context, m *session.Manager, o Options, emit func(Result)) (*Summary, error) {
	setup, trace, tools, err := validate(&o)
	if err != nil {
		return nil, err
	}
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB}, "crash")
	if err != nil {
		return nil, err
	}
	defer run.Close()
	ctx = run.Context()
	sum := &Summary{Session: run.ID(), Lanes: map[string]*LaneSummary{}}
	err = check(ctx, run, setup, trace, tools, o.Crash, sum, emit)
	return sum, run.Finish(ctx, err)
}

// validate parses the ops and finds each lane's checker.
func validate(o *Options) (setup, trace []*agentv1.Request, tools []hostfsck.Tool, err error) {
	if len(o.Lanes) == 0 {
		return nil, nil, nil, session.Invalid("lanes", "at least one lane spec is required")
	}
	specs, err := session.ValidateCreate(&session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB})
	if err != nil {
		return nil, nil, nil, err
	}
	for i, s := range specs {
		t, err := hostfsck.For(s.Layer().FS)
		if err != nil {
			return nil, nil, nil, session.Invalid(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
		if err := t.Installed(); err != nil {
			return nil, nil, nil, session.Invalid(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
		tools = append(tools, t)
	}
	if err := o.Crash.Check(); err != nil {
		return nil, nil, nil, session.Invalid("crash", "%v", err)
	}
	if setup, err = parseOps("setup", o.Setup); err != nil {
		return nil, nil, nil, err
	}
	if len(o.Trace) == 0 {
		return nil, nil, nil, session.Invalid("trace", "at least one op is required")
	}
	trace, err = parseOps("trace", o.Trace)
	return setup, trace, tools, err
}

// parseOps parses short-form ops, naming the field of a bad one.
func parseOps(field string, ops []string) ([]*agentv1.Request, error) {
	if len(ops) > MaxTraceOps {
		return nil, session.Invalid(field, "%d ops, at most %d", len(ops), MaxTraceOps)
	}
	out := make([]*agentv1.Request, len(ops))
	for i, s := range ops {
		r, err := opspec.ParseRequest(s)
		if err == nil {
			_, _, err = session.ValidateOp(r)
		}
		if err != nil {
			return nil, session.Invalid(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		out[i] = r
	}
	return out, nil
}

// check is Run past the session's creation.
func check(ctx context.Context, run *session.Run, setup, trace []*agentv1.Request, tools []hostfsck.Tool, co crash.Options, sum *Summary, emit func(Result)) error {
	sync := &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}
	for _, op := range append(setup, sync) {
		if _, err := run.Apply(ctx, op); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	if _, err := run.Checkpoint(ctx, "crash: the log's start"); err != nil {
		return err
	}
	lanes := run.Lanes()
	for i := range lanes {
		if err := run.Disk(ctx, i, "start write log", func(d *overlay.Device) error { return d.StartLog() }); err != nil {
			return err
		}
	}
	for _, op := range trace {
		if _, err := run.Apply(ctx, op); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
	}
	dir, err := scratch.MkdirTemp("", "themis-crash-")
	if err != nil {
		return err
	}
	defer dir.Remove()
	start := time.Now()
	n := 0
	for i, lane := range lanes {
		ls := &LaneSummary{}
		sum.Lanes[lane] = ls
		k, err := checkLane(ctx, run, i, tools[i], co, filepath.Join(dir.Path, fmt.Sprintf("lane-%d.img", i)), ls, func(r Result) {
			r.Lane = lane
			if emit != nil {
				emit(r)
			}
		})
		n += k
		if err != nil {
			return fmt.Errorf("lane %s: %w", lane, err)
		}
	}
	sum.Elapsed = time.Since(start)
	if s := sum.Elapsed.Seconds(); s > 0 {
		sum.StatesPerSec = float64(n) / s
	}
	return nil
}

// checkLane enumerates lane i's crash states and checks each; it returns
// how many it checked.
func checkLane(ctx context.Context, run *session.Run, i int, tool hostfsck.Tool, co crash.Options, img string, ls *LaneSummary, emit func(Result)) (int, error) {
	var info overlay.LogInfo
	if err := run.Disk(ctx, i, "read write log", func(d *overlay.Device) (err error) { info, err = d.Log(); return err }); err != nil {
		return 0, err
	}
	if info.Overflowed {
		return 0, fmt.Errorf("the write log passed %d entries", overlay.MaxLogEntries)
	}
	for _, e := range info.Entries {
		if e.Flush {
			ls.Flushes++
		} else {
			ls.Writes++
		}
	}
	states, truncated, err := crash.Enumerate(info.Entries, co)
	if err != nil {
		return 0, err
	}
	ls.Truncated = truncated
	ls.Replay = tool.Name + " after a host journal replay"
	for k, st := range states {
		r, err := checkState(ctx, run, i, tool, st, img)
		if err != nil {
			return k, fmt.Errorf("crash state %d (%s): %w", k, st, err)
		}
		if errors.Is(r.replayErr, hostfsck.ErrNoRecovery) {
			ls.Replay = tool.Name + " (no journal replay on the host for this filesystem)"
		}
		r.Index = k
		ls.States++
		if r.Verdict != Clean {
			ls.Dirty++
		}
		emit(r.Result)
	}
	return len(states), nil
}

// checked is a Result with how its journal replay went.
type checked struct {
	Result
	replayErr error
}

// checkState writes st's crash view to img, replays its journal and runs
// fsck on it.
func checkState(ctx context.Context, run *session.Run, i int, tool hostfsck.Tool, st crash.State, img string) (checked, error) {
	r := checked{Result: Result{State: st}}
	err := run.Disk(ctx, i, "write crash state", func(d *overlay.Device) error {
		v, err := d.CrashView(st.Keep)
		if err != nil {
			return err
		}
		return scratch.WriteImage(img, v, v.Size())
	})
	if err != nil {
		return r, err
	}
	replayOut, err := tool.Recover(ctx, img)
	if err != nil && !errors.Is(err, hostfsck.ErrNoRecovery) {
		r.Verdict, r.Output = Broken, err.Error()
		return r, nil
	}
	r.replayErr = err
	verdict, out, err := tool.Run(ctx, img)
	if err != nil {
		return r, err
	}
	switch verdict {
	case hostfsck.Clean:
		r.Verdict = Clean
	case hostfsck.Dirty:
		r.Verdict = Dirty
	default:
		r.Verdict = Broken
	}
	if r.Verdict != Clean {
		r.Output = hostfsck.Truncate(append(replayOut, out...), hostfsck.MaxOutput)
	}
	return r, nil
}
