package crashcheck

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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
	// Workload, instead of Trace, names a generated set of traces
	// ("ace:seq1", "ace:seq2": crash.AceWorkloads, from crash.AceSetup
	// unless Setup is given), each run from the checkpoint in turn; at most
	// MaxWorkloads of them (0: all).
	Workload     string
	MaxWorkloads int
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
	Lane string
	// Workload is the trace's index (0 with a single Trace) and Trace its
	// ops.
	Workload int
	Trace    []string
	Index    int // of the lane's states, in crash.Enumerate's order
	State    crash.State
	Verdict  string
	// Output is the fsck's (and the journal replay's) output, cut to
	// hostfsck.MaxOutput, for a state that is not clean.
	Output string
	// Durability is, for a state after the trace's final fsync or
	// fdatasync of a file returned, "kept" when the file holds what it
	// held then, or what was lost; "" when not checked.
	Durability string
}

// Kept is Result.Durability of a state that kept what was made durable.
const Kept = "kept"

// LaneSummary is one lane's log and states.
type LaneSummary struct {
	Writes, Flushes int
	States, Dirty   int // checked, and not clean (dirty or broken)
	Truncated       bool
	Replay          string // the host's journal replay step, or why none
	// Durable counts the states checked for what the final fsync made
	// durable, Lost those that lost it; DurableNote says why none were.
	Durable, Lost int
	DurableNote   string
}

// Summary is a run's outcome.
type Summary struct {
	Session string
	// Workloads is how many traces ran; Truncated says MaxWorkloads cut
	// a generated set.
	Workloads int
	Truncated bool
	Lanes     map[string]*LaneSummary
	Elapsed   time.Duration
	// StatesPerSec is the crash states checked per second of checking.
	StatesPerSec float64
}

// Run checks o's crash states in a session of its own; emit (optional)
// gets each result as it is made. Bad options are a FieldError.
func Run(ctx context.Context, m *session.Manager, o Options, emit func(Result)) (*Summary, error) {
	p, err := validate(&o)
	if err != nil {
		return nil, err
	}
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB}, "crash")
	if err != nil {
		return nil, err
	}
	defer run.Close()
	ctx = run.Context()
	sum := &Summary{Session: run.ID(), Lanes: map[string]*LaneSummary{}, Truncated: p.truncated}
	for _, lane := range run.Lanes() {
		sum.Lanes[lane] = &LaneSummary{}
	}
	start := time.Now()
	err = check(ctx, run, p, o.Crash, sum, emit)
	sum.Elapsed = time.Since(start)
	if s := sum.Elapsed.Seconds(); s > 0 {
		n := 0
		for _, ls := range sum.Lanes {
			n += ls.States
		}
		sum.StatesPerSec = float64(n) / s
	}
	return sum, run.Finish(ctx, err)
}

// plan is a validated run: the setup, the traces (their text and ops) and
// each lane's checker.
type plan struct {
	fs        []string // each lane's filesystem
	setup     []*agentv1.Request
	traces    [][]string
	ops       [][]*agentv1.Request
	tools     []hostfsck.Tool
	truncated bool
}

// validate parses the ops and finds each lane's checker.
func validate(o *Options) (*plan, error) {
	if len(o.Lanes) == 0 {
		return nil, session.Invalid("lanes", "at least one lane spec is required")
	}
	specs, err := session.ValidateCreate(&session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB})
	if err != nil {
		return nil, err
	}
	p := &plan{}
	for i, s := range specs {
		t, err := hostfsck.For(s.Layer().FS)
		if err == nil {
			err = t.Installed()
		}
		if err != nil {
			return nil, session.Invalid(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
		p.tools, p.fs = append(p.tools, t), append(p.fs, s.Layer().FS)
	}
	if err := o.Crash.Check(); err != nil {
		return nil, session.Invalid("crash", "%v", err)
	}
	if err := p.traceSet(o); err != nil {
		return nil, err
	}
	if p.setup, err = parseOps("setup", o.Setup); err != nil {
		return nil, err
	}
	for i, t := range p.traces {
		ops, err := parseOps(fmt.Sprintf("trace (workload %d)", i), t)
		if err != nil {
			return nil, err
		}
		p.ops = append(p.ops, ops)
	}
	return p, nil
}

// traceSet fills p.traces from o's Trace or Workload (and its setup).
func (p *plan) traceSet(o *Options) error {
	switch {
	case o.Workload != "" && len(o.Trace) > 0:
		return session.Invalid("workload", "give a trace or a workload, not both")
	case o.Workload == "" && len(o.Trace) == 0:
		return session.Invalid("trace", "at least one op is required (or a workload)")
	case o.Workload == "":
		p.traces = [][]string{o.Trace}
		return nil
	}
	ws, cut, err := crash.AceWorkloads(o.Workload, o.MaxWorkloads)
	if err != nil {
		return session.Invalid("workload", "%v", err)
	}
	if o.Setup == nil {
		o.Setup = crash.AceSetup
	}
	p.traces, p.truncated = ws, cut
	return nil
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

// check is Run past the session's creation: the setup and a sync, the
// checkpoint, then every trace from it under a write log, its crash
// states checked.
func check(ctx context.Context, run *session.Run, p *plan, co crash.Options, sum *Summary, emit func(Result)) error {
	sync := &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}
	for _, op := range append(p.setup, sync) {
		if _, err := run.Apply(ctx, op); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	root, err := run.Checkpoint(ctx, "crash: the log's start")
	if err != nil {
		return err
	}
	dir, err := scratch.MkdirTemp("", "themis-crash-")
	if err != nil {
		return err
	}
	defer dir.Remove()
	for w, ops := range p.ops {
		if w > 0 {
			if err := run.Restore(ctx, "crash: next workload", root); err != nil {
				return err
			}
		}
		if err := checkTrace(ctx, run, p, w, ops, co, dir.Path, sum, emit); err != nil {
			return fmt.Errorf("workload %d (%s): %w", w, crash.Describe(p.traces[w]), err)
		}
		sum.Workloads++
	}
	return nil
}

// checkTrace runs trace w under a write log on every lane and checks
// every lane's crash states.
func checkTrace(ctx context.Context, run *session.Run, p *plan, w int, ops []*agentv1.Request, co crash.Options, dir string, sum *Summary, emit func(Result)) error {
	lanes := run.Lanes()
	for i := range lanes {
		if err := run.Disk(ctx, i, "start write log", func(d *overlay.Device) error { return d.StartLog() }); err != nil {
			return err
		}
	}
	for _, op := range ops {
		if _, err := run.Apply(ctx, op); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
	}
	for i, lane := range lanes {
		lc := laneCheck{i: i, fs: p.fs[i], tool: p.tools[i], co: co, img: filepath.Join(dir, fmt.Sprintf("lane-%d.img", i))}
		if err := lc.durableAfter(ctx, run, lane, ops[len(ops)-1]); err != nil {
			return fmt.Errorf("lane %s: %w", lane, err)
		}
		err := lc.check(ctx, run, sum.Lanes[lane], func(r Result) {
			r.Lane, r.Workload, r.Trace = lane, w, p.traces[w]
			if emit != nil {
				emit(r)
			}
		})
		if err != nil {
			return fmt.Errorf("lane %s: %w", lane, err)
		}
	}
	return nil
}

// laneCheck is one lane's part of checking a trace.
type laneCheck struct {
	i    int
	fs   string
	tool hostfsck.Tool
	co   crash.Options
	img  string   // the scratch file of its crash states
	dur  *durable // what the trace's last op made durable (nil: nothing checked)
}

// durableAfter fills lc.dur from the lane's log and the trace's last op.
func (lc *laneCheck) durableAfter(ctx context.Context, run *session.Run, lane string, last *agentv1.Request) error {
	info, err := lc.log(ctx, run)
	if err != nil {
		return err
	}
	flushes := 0
	for _, e := range info.Entries {
		if e.Flush {
			flushes++
		}
	}
	lc.dur, err = durableAfter(ctx, run, lane, last, flushes)
	return err
}

// log is the lane's write log.
func (lc *laneCheck) log(ctx context.Context, run *session.Run) (overlay.LogInfo, error) {
	var info overlay.LogInfo
	err := run.Disk(ctx, lc.i, "read write log", func(d *overlay.Device) (err error) { info, err = d.Log(); return err })
	if err == nil && info.Overflowed {
		err = fmt.Errorf("the write log passed %d entries", overlay.MaxLogEntries)
	}
	return info, err
}

// check enumerates the lane's crash states and checks each, adding to ls.
func (lc *laneCheck) check(ctx context.Context, run *session.Run, ls *LaneSummary, emit func(Result)) error {
	info, err := lc.log(ctx, run)
	if err != nil {
		return err
	}
	for _, e := range info.Entries {
		if e.Flush {
			ls.Flushes++
		} else {
			ls.Writes++
		}
	}
	states, truncated, err := crash.Enumerate(info.Entries, lc.co)
	if err != nil {
		return err
	}
	ls.Truncated = ls.Truncated || truncated
	ls.Replay = lc.tool.Name + " after a host journal replay"
	if lc.dur != nil && !strings.HasPrefix(lc.fs, "ext") {
		ls.DurableNote = "not checked on " + lc.fs + ": no host reader of its files yet"
	}
	for k, st := range states {
		r, err := checkState(ctx, run, lc.i, lc.tool, st, lc.img)
		if err != nil {
			return fmt.Errorf("crash state %d (%s): %w", k, st, err)
		}
		if errors.Is(r.replayErr, hostfsck.ErrNoRecovery) {
			ls.Replay = lc.tool.Name + " (no journal replay on the host for this filesystem)"
		}
		if err := lc.checkDurable(&r.Result, ls); err != nil {
			return fmt.Errorf("crash state %d (%s): durability: %w", k, st, err)
		}
		r.Index = k
		ls.States++
		if r.Verdict != Clean {
			ls.Dirty++
		}
		emit(r.Result)
	}
	return nil
}

// checkDurable sets r.Durability for a state after the final fsync's
// flushes, on an ext* lane whose image opened.
func (lc *laneCheck) checkDurable(r *Result, ls *LaneSummary) error {
	if lc.dur == nil || r.State.Flushes < lc.dur.flushes || !strings.HasPrefix(lc.fs, "ext") || r.Verdict == Broken {
		return nil
	}
	lost, err := checkDurable(lc.img, lc.dur)
	if err != nil {
		return err
	}
	ls.Durable++
	r.Durability = Kept
	if lost != "" {
		ls.Lost++
		r.Durability = "LOST " + lost
	}
	return nil
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
