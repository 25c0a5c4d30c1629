package crashcheck

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/api"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/relay"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// MaxTraceOps bounds Options.Setup and Options.Trace.
const MaxTraceOps = 64

// Options are the inputs of Run.
type Options struct {
	// Lanes are lane specs, as for Create (a host fsck must exist for
	// each: hostfsck).
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
	// NoSetupSync leaves out the sync after Setup (a crash finding of
	// explore --crash: its path ran unsynced before the log). Each setup
	// op is then followed by a walk of every lane, as the search
	// fingerprinted the lanes after every op of its path
	// (explore.WalkedBefore): what a walk leaves in memory is part of what
	// the next op, and the trace, meet.
	NoSetupSync bool
	// Only, when not nil, is the one crash state checked (a crash
	// finding's Keep, replayed) instead of the enumeration: one trace
	// then, and crash.StateOf must find it a state of each lane's log.
	Only []int
	// StreamImage, with Only, sends the state's disk image to Sinks.Image,
	// per lane, before it is checked (the journal not replayed: as the
	// crash left it).
	StreamImage bool
	// Image is the guest image to boot (session.CreateOptions.Image).
	Image string
	// Minimize is how many crash findings get their trace shrunk (0:
	// DefaultMinimize; -1: none; at most MaxMinimize).
	Minimize int
	// Atomic fingerprints each lane before the trace and after every op
	// of it, and each mounted crash state: a state equal to no op
	// boundary is a finding (class "not-atomic"). The walks read every
	// file (atime), so the trace's writes can differ from a run without.
	Atomic bool
	// HostReplay checks each state on the host alone (the journal
	// replayed by e2fsck -E journal_only on ext3/4, nothing on other
	// filesystems) instead of mounting it in the guest first.
	HostReplay bool
}

// Defaults and bounds of Options.Minimize.
const (
	DefaultMinimize = 4
	MaxMinimize     = 64
)

// Sinks get a run's output as it is made; any may be nil.
type Sinks struct {
	Result func(Result)
	// Finding gets each crash finding as recorded, then again once
	// minimized (same ID).
	Finding func(session.Finding)
	// Image gets a checked state's image in chunks of zeros left out
	// (Options.StreamImage): size is the image's.
	Image func(lane string, off int64, data []byte, size int64) error
}

// Verdicts of a Result.
const (
	Clean  = api.CrashClean
	Dirty  = api.CrashDirty
	Broken = api.CrashBroken // fsck could not read it (no superblock, ...)
	// NoState is the verdict of Options.Only when the replay's log has no
	// such crash state (it logged other writes): nothing was checked.
	NoState = api.CrashNoState
	// KernelCrash, Hung and Died are the verdicts of a state whose check
	// in the guest (its mount, the reads, the unmount) lost the guest
	// (package relay): its kernel crashed with a report (Result.Kernel),
	// it gave no answer within the call's bound, or it died without a
	// report. The run goes on in a fresh session.
	KernelCrash = relay.KernelCrash
	Hung        = relay.Hung
	Died        = relay.Died
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
	// Fsynced is, for a LOST state, what the final fsync or fdatasync
	// made durable ("an empty file", "a file", "a directory"): a
	// finding's signature tells an empty file lost from data lost.
	Fsynced string
	// Atomicity is, with Options.Atomic, the op boundary of the trace
	// whose fingerprint the mounted state equals ("op 0": before the
	// first op, "op k": after the k-th), or NotAtBoundary; "" when not
	// checked.
	Atomicity string
	// Kernel is the kernel's report of a KernelCrash, nil otherwise.
	Kernel *kreport.Report
	// Session is the session the state was checked in (a run goes on in
	// a fresh one after a death).
	Session string
}

// NotAtBoundary is Result.Atomicity of a state equal to no op boundary.
const NotAtBoundary = api.NotAtBoundary

// Kept is Result.Durability of a state that kept what was made durable.
const Kept = "kept"

// NameOnly starts Result.Durability of a state that lost only a name its
// filesystem's fsync does not promise (family.FsyncNameless): counted
// (LaneSummary.Unnamed), not lost.
const NameOnly = "name only, not promised by this fsync: "

// LaneSummary is one lane's log and states.
type LaneSummary struct {
	Writes, Flushes int
	States, Dirty   int // checked, and not clean (dirty or broken)
	Truncated       bool
	Replay          string // the host's journal replay step, or why none
	// Durable counts the states checked for what the final fsync made
	// durable, Lost those that lost it; DurableNote says why none were.
	// Unnamed counts those that lost only a name the filesystem's fsync
	// does not promise (NameOnly).
	Durable, Lost, Unnamed int
	DurableNote            string
	// Atomic counts the states compared with the op boundaries
	// (Options.Atomic), AtBoundary those equal to one.
	Atomic, AtBoundary int
	// Bad counts the states of any bad class (Class).
	Bad int
	// Deaths counts the states whose check lost the guest (KernelCrash,
	// Hung, Died); Skipped those not checked after one, SkipNote why.
	Deaths, Skipped int
	SkipNote        string
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
	// Findings is how many crash findings were recorded.
	Findings int
	// Sessions are every session the run used, Session first: a state
	// whose check lost the guest ends its session (failed) and a fresh
	// one goes on (Deaths of them). Partial, when set, says what the run
	// left unchecked and why (too many deaths).
	Sessions []string
	Deaths   int
	Partial  string
}

// Run checks o's crash states in a session of its own, records a crash
// finding per lane and trace with a state not clean or that lost what was
// made durable, and minimizes the first o.Minimize of them. Bad options
// are a FieldError.
func Run(ctx context.Context, m *session.Manager, o Options, out Sinks) (_ *Summary, err error) {
	p, err := validate(&o)
	if err != nil {
		return nil, err
	}
	ch, ctx, err := relay.Start(ctx, m, session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Spares: !o.HostReplay, Image: o.Image}, "crash")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ch.Close()) }()
	run := ch.Run()
	sum := &Summary{Session: run.ID(), Lanes: map[string]*LaneSummary{}, Truncated: p.truncated}
	for _, lane := range run.Lanes() {
		sum.Lanes[lane] = &LaneSummary{}
	}
	start := time.Now()
	rec := &recorder{run: run, ctx: context.WithoutCancel(ctx), specs: o.Lanes, fs: p.fs, setup: o.Setup, setupSync: !o.NoSetupSync, send: out.Finding}
	err = check(ctx, ch.Chain, ch.Dir, p, sum, rec, out)
	sum.Elapsed, sum.Findings = time.Since(start), len(rec.found)
	sum.Sessions, sum.Deaths = ch.Sessions(), ch.Deaths()
	if s := sum.Elapsed.Seconds(); s > 0 {
		n := 0
		for _, ls := range sum.Lanes {
			n += ls.States
		}
		sum.StatesPerSec = float64(n) / s
	}
	return sum, ch.Finish(err)
}

// plan is a validated run: the setup, the traces (their text and ops),
// each lane's checker, and o's choices.
type plan struct {
	fs        []string // each lane's filesystem
	setup     []*agentv1.Request
	setupSync bool
	traces    [][]string
	ops       [][]*agentv1.Request
	tools     []hostfsck.Tool
	truncated bool
	crash     crash.Options
	only      []int
	image     bool
	atomic    bool
	minimize  int
}

// validate parses the ops and finds each lane's checker.
func validate(o *Options) (*plan, error) {
	if len(o.Lanes) == 0 {
		return nil, errkind.Invalid("lanes", "at least one lane spec is required")
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
			return nil, errkind.Invalid(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
		p.tools, p.fs = append(p.tools, t), append(p.fs, s.Layer().FS)
	}
	if err := o.Crash.Check(); err != nil {
		return nil, errkind.Invalid("crash", "%v", err)
	}
	if err := p.choices(o); err != nil {
		return nil, err
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

// choices checks and copies o's choices that are not ops.
func (p *plan) choices(o *Options) error {
	switch {
	case o.Minimize < -1 || o.Minimize > MaxMinimize:
		return errkind.Invalid("minimize", "%d: want -1 (none) to %d", o.Minimize, MaxMinimize)
	case o.Only != nil && o.Workload != "":
		return errkind.Invalid("only", "checks one state of one trace, not of a workload")
	case o.StreamImage && o.Only == nil:
		return errkind.Invalid("stream_image", "needs only: the one state whose image to send")
	case o.Atomic && o.HostReplay:
		return errkind.Invalid("atomic", "compares the states mounted in the guest: not with host_replay")
	}
	p.crash, p.only, p.image, p.minimize, p.setupSync, p.atomic = o.Crash, o.Only, o.StreamImage, o.Minimize, !o.NoSetupSync, o.Atomic
	switch {
	case p.only != nil:
		p.minimize = -1 // a replay: the trace is the finding's
	case p.minimize == 0:
		p.minimize = DefaultMinimize
	}
	return nil
}

// traceSet fills p.traces from o's Trace or Workload (and its setup).
func (p *plan) traceSet(o *Options) error {
	switch {
	case o.Workload != "" && len(o.Trace) > 0:
		return errkind.Invalid("workload", "give a trace or a workload, not both")
	case o.Workload == "" && len(o.Trace) == 0:
		return errkind.Invalid("trace", "at least one op is required (or a workload)")
	case o.Workload == "":
		p.traces = [][]string{o.Trace}
		return nil
	}
	ws, cut, err := crash.AceWorkloads(o.Workload, o.MaxWorkloads)
	if err != nil {
		return errkind.Invalid("workload", "%v", err)
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
		return nil, errkind.Invalid(field, "%d ops, at most %d", len(ops), MaxTraceOps)
	}
	out := make([]*agentv1.Request, len(ops))
	for i, s := range ops {
		r, err := opspec.ParseRequest(s)
		if err == nil {
			_, _, err = session.ValidateOp(r)
		}
		if err != nil {
			return nil, errkind.Invalid(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		out[i] = r
	}
	return out, nil
}

// check is Run past the session's creation: the setup and a sync, the
// checkpoint, then every trace from it under a write log, its crash
// states checked (their images in the run's scratch dir) and its findings
// recorded; then the minimization. Past the chain's deaths
// (relay.ErrTooManyDeaths) what is left is not checked, and sum says so.
func check(ctx context.Context, ch *relay.Chain, dir string, p *plan, sum *Summary, rec *recorder, out Sinks) error {
	t := &tracer{chain: ch, run: ch.Run(), p: p, dir: dir, out: out}
	if err := t.prepare(ctx); err != nil {
		return err
	}
	for w, ops := range p.ops {
		bad, err := t.checkTrace(ctx, w, ops, sum)
		for _, b := range bad {
			rec.record(b)
		}
		if errors.Is(err, relay.ErrTooManyDeaths) {
			sum.Partial = fmt.Sprintf("%v: stopped in workload %d of %d, the rest not checked, no finding minimized", err, w, len(p.ops))
			return rec.err()
		}
		if err != nil {
			return fmt.Errorf("workload %d (%s): %w", w, crash.Describe(p.traces[w]), err)
		}
		sum.Workloads++
	}
	err := rec.minimize(ctx, t, p.minimize)
	if errors.Is(err, relay.ErrTooManyDeaths) {
		sum.Partial, err = fmt.Sprintf("%v: the findings left not minimized", err), nil
	}
	return errors.Join(err, rec.err())
}

// prepare brings the current session to the log's start: periodic
// writeback off, the setup and a sync (or, for a search's path, a walk
// after each setup op), the checkpoint (t.root).
func (t *tracer) prepare(ctx context.Context) error {
	if err := QuietWriteback(ctx, t.run); err != nil {
		return err
	}
	ops := t.p.setup
	if t.p.setupSync {
		ops = append(slices.Clone(ops), &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
	}
	for _, op := range ops {
		if _, err := t.run.Apply(ctx, op); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		if !t.p.setupSync {
			if err := walkLanes(ctx, t.run); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
		}
	}
	var err error
	t.root, err = t.run.Checkpoint(ctx, "crash: the log's start")
	t.ran = false
	return err
}

// QuietWriteback turns the guest's periodic writeback off, before a run's
// first checkpoint: dirty pages then reach the disk only when an op makes
// them (sync, fsync, umount, memory pressure), so a write log holds what
// the trace wrote rather than the flusher's timing, and a crash finding
// replays. The crash states of a background writeback are left out.
func QuietWriteback(ctx context.Context, run *session.Run) error {
	_, err := run.CallOK(ctx, "periodic writeback off", &agentv1.Request{Op: &agentv1.Request_Writeback{Writeback: &agentv1.Writeback{}}})
	return err
}

// tracer runs traces from the checkpoint and checks their crash states,
// in the chain's current session: after a death, a fresh one rebuilt to
// the checkpoint (live).
type tracer struct {
	chain *relay.Chain
	run   *session.Run
	p     *plan
	root  vmm.CheckpointID
	dir   string // scratch
	out   Sinks
	ran   bool // a trace ran since the checkpoint: restore first
	// bounds are the last trace's op boundary roots, by lane (nil: no
	// atomic check).
	bounds [][][]byte
}

// badLane is one lane's states of one trace that are not clean or lost
// what was made durable.
type badLane struct {
	lane     int
	name     string
	workload int
	trace    []string
	ops      []*agentv1.Request
	results  []Result    // bad, the deaths left out
	deaths   []Result    // the states whose check lost the guest
	ls       LaneSummary // this trace's counts alone
}

// start restores the checkpoint (after the first trace) and starts a write
// log on the lanes given (nil: all).
func (t *tracer) start(ctx context.Context, lanes []int) error {
	if err := t.live(ctx); err != nil {
		return err
	}
	if t.ran {
		if err := t.run.Restore(ctx, "crash: next trace", t.root); err != nil {
			return err
		}
	}
	t.ran = true
	if lanes == nil {
		for i := range t.run.Lanes() {
			lanes = append(lanes, i)
		}
	}
	for _, i := range lanes {
		if err := t.run.Disk(ctx, i, "start write log", func(d *overlay.Device) error { return d.StartLog() }); err != nil {
			return err
		}
	}
	return nil
}

// apply runs ops (an errno is a result, not an error); with the plan's
// atomic check, it returns each lane's fingerprint root before the first
// op and after each one.
func (t *tracer) apply(ctx context.Context, ops []*agentv1.Request) ([][][]byte, error) {
	var bounds [][][]byte
	if err := t.boundary(ctx, &bounds); err != nil {
		return nil, err
	}
	for _, op := range ops {
		if _, err := t.run.Apply(ctx, op); err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		if err := t.boundary(ctx, &bounds); err != nil {
			return nil, err
		}
	}
	return bounds, nil
}

// boundary appends each lane's root to bounds (by lane) under the atomic
// check.
func (t *tracer) boundary(ctx context.Context, bounds *[][][]byte) error {
	if !t.p.atomic {
		return nil
	}
	lanes := t.run.Lanes()
	if *bounds == nil {
		*bounds = make([][][]byte, len(lanes))
	}
	for i, lane := range lanes {
		root, err := laneRoot(ctx, t.run, lane)
		if err != nil {
			return err
		}
		(*bounds)[i] = append((*bounds)[i], root)
	}
	return nil
}

// walkLanes fingerprints every lane for what the walk does (it looks up
// every entry and reads every file), not for its answer: an entry the
// walk cannot read is the search's finding, not the replay's.
func walkLanes(ctx context.Context, run *session.Run) error {
	for _, lane := range run.Lanes() {
		if _, err := fingerprint(ctx, run, lane); err != nil {
			return err
		}
	}
	return nil
}

// fingerprint walks lane and answers its fingerprint, timestamps left out.
func fingerprint(ctx context.Context, run *session.Run, lane string) (*agentv1.Response, error) {
	return run.Call(ctx, "fingerprint "+lane, agent.NewRequest(&agentv1.Fingerprint{Lane: lane, TimeMode: agentv1.TimeMode_TIME_MODE_NONE}))
}

// laneRoot is a lane's fingerprint root, timestamps left out.
func laneRoot(ctx context.Context, run *session.Run, lane string) ([]byte, error) {
	resp, err := fingerprint(ctx, run, lane)
	if err == nil {
		err = unreadable(resp)
	}
	return resp.GetFingerprint().GetRoot(), err
}

// checkTrace runs trace w under a write log on every lane, checks every
// lane's crash states into sum and returns the lanes with bad ones (with
// an error too: those found before it).
func (t *tracer) checkTrace(ctx context.Context, w int, ops []*agentv1.Request, sum *Summary) ([]badLane, error) {
	if err := t.rerun(ctx, ops); err != nil {
		return nil, err
	}
	var bad []badLane
	for i, lane := range t.run.Lanes() {
		if t.chain.Dead() != nil { // the last lane's last state lost the guest
			if err := t.rerun(ctx, ops); err != nil {
				return bad, fmt.Errorf("lane %s: %w", lane, err)
			}
		}
		b := badLane{lane: i, name: lane, workload: w, trace: t.p.traces[w], ops: ops}
		err := t.laneCheck(i, ops).run(ctx, t.run, lane, ops[len(ops)-1], &b.ls, func(r Result) bool {
			r.Lane, r.Workload, r.Trace = lane, w, t.p.traces[w]
			b.add(r)
			if t.out.Result != nil {
				t.out.Result(r)
			}
			return false
		})
		sum.Lanes[lane].add(b.ls)
		if len(b.results) > 0 || len(b.deaths) > 0 {
			bad = append(bad, b)
		}
		if err != nil {
			return bad, fmt.Errorf("lane %s: %w", lane, err)
		}
	}
	return bad, nil
}

// add keeps r when it is bad, a death apart.
func (b *badLane) add(r Result) {
	switch {
	case isDeath(r):
		b.deaths = append(b.deaths, r)
	case Class(r) != "":
		b.results = append(b.results, r)
	}
}

// rerun runs ops from the checkpoint under a write log on every lane, in
// a live session (a fresh one rebuilt after a death), and keeps their op
// boundaries (t.bounds).
func (t *tracer) rerun(ctx context.Context, ops []*agentv1.Request) error {
	if err := t.start(ctx, nil); err != nil {
		return err
	}
	var err error
	t.bounds, err = t.apply(ctx, ops)
	return err
}

// live makes the tracer's session one whose guest lives: after a death,
// a fresh session (relay.Chain.Live) brought to the log's start.
func (t *tracer) live(ctx context.Context) error {
	run, replaced, err := t.chain.Live()
	if err != nil {
		return err
	}
	t.run = run
	if !replaced {
		return nil
	}
	if err := t.prepare(ctx); err != nil {
		return fmt.Errorf("rebuild the log's start in session %s, after the guest died: %w", run.ID(), err)
	}
	return nil
}

// laneCheck is lane i's checker under the run's plan, for the trace ops.
func (t *tracer) laneCheck(i int, ops []*agentv1.Request) *laneCheck {
	lc := &laneCheck{i: i, fs: t.p.fs[i], tool: t.p.tools[i], co: t.p.crash, only: t.p.only, img: filepath.Join(t.dir, fmt.Sprintf("lane-%d.img", i)),
		image: t.imageSink(), mount: SpareMount(t.run, i), t: t, ops: ops}
	if t.bounds != nil {
		lc.bounds = t.bounds[i]
	}
	return lc
}

// SpareMount is the agent Mount of lane i's spare disk in run's session,
// nil when it has none (a session without spares, an overlay lane).
func SpareMount(run *session.Run, i int) *agentv1.Mount {
	if !run.HasSpare(i) {
		return nil
	}
	return launch.SpareMount(i, run.Specs()[i])
}

// imageSink is where a checked state's image goes, nil when not asked.
func (t *tracer) imageSink() func(lane string, off int64, data []byte, size int64) error {
	if !t.p.image {
		return nil
	}
	return t.out.Image
}

// add adds one trace's counts of a lane.
func (ls *LaneSummary) add(o LaneSummary) {
	ls.Writes += o.Writes
	ls.Flushes += o.Flushes
	ls.States += o.States
	ls.Dirty += o.Dirty
	ls.Durable += o.Durable
	ls.Lost += o.Lost
	ls.Unnamed += o.Unnamed
	ls.Atomic += o.Atomic
	ls.AtBoundary += o.AtBoundary
	ls.Bad += o.Bad
	ls.Deaths += o.Deaths
	ls.Skipped += o.Skipped
	ls.Truncated = ls.Truncated || o.Truncated
	if o.Replay != "" {
		ls.Replay = o.Replay
	}
	if o.DurableNote != "" {
		ls.DurableNote = o.DurableNote
	}
	if o.SkipNote != "" {
		ls.SkipNote = o.SkipNote
	}
}
