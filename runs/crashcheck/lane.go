package crashcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/family"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/relay"
	"github.com/themisfs/themis/session"
)

// LaneChecker checks one lane's crash states of a trace that ran under a
// write log (the log still running): explore --crash uses it after a
// persistence op, Run after each trace.
type LaneChecker struct {
	// Index and Name are the lane's, FS its filesystem, Tool its host
	// checker (hostfsck.For), Crash the enumeration's bounds (checked).
	Index int
	Name  string
	FS    string
	Tool  hostfsck.Tool
	Crash crash.Options
	// Image is the scratch file each state is written to.
	Image string
	// Mount, when set, is the agent Mount of the lane's spare disk
	// (launch.SpareMount): each state is mounted in the guest there before
	// the host checker runs; nil: the host replays the journal.
	Mount *agentv1.Mount
}

// laneCheck is a LaneChecker with a run's choices and what the trace made
// durable.
type laneCheck struct {
	i     int
	fs    string
	tool  hostfsck.Tool
	co    crash.Options
	only  []int  // the one state to check (nil: enumerate)
	img   string // the scratch file of its crash states
	image func(lane string, off int64, data []byte, size int64) error
	dur   *durable       // what the trace's last op made durable (nil: nothing checked)
	mount *agentv1.Mount // the spare disk's mount (nil: host replay)
	// laneDown is the lane mountSpare unmounted ("": none).
	laneDown string
	// bounds are the lane's roots at the trace's op boundaries (nil: no
	// atomic check).
	bounds [][]byte
	// t, when set, is the run's tracer: a state whose check loses the
	// guest gets that death as its verdict and the check goes on in a
	// fresh session where t runs ops, the trace, again (resume); nil (a
	// LaneChecker), a death is the check's error.
	t    *tracer
	ops  []*agentv1.Request
	last *agentv1.Request
}

// Check checks the lane's crash states, adding to ls; emit gets each
// result (Lane set; Workload and Trace left to the caller) and stops the
// check by returning true.
func (c LaneChecker) Check(ctx context.Context, run *session.Run, last *agentv1.Request, ls *LaneSummary, emit func(Result) bool) error {
	lc := &laneCheck{i: c.Index, fs: c.FS, tool: c.Tool, co: c.Crash, img: c.Image, mount: c.Mount}
	return lc.run(ctx, run, c.Name, last, ls, emit)
}

// run is what the trace's last op made durable, then the check.
func (lc *laneCheck) run(ctx context.Context, run *session.Run, lane string, last *agentv1.Request, ls *LaneSummary, emit func(Result) bool) error {
	lc.last = last
	info, err := lc.log(ctx, run)
	if err != nil {
		return err
	}
	lc.dur, err = durableAfter(ctx, run, lane, last, flushCount(info.Entries))
	if err != nil {
		return err
	}
	return lc.check(ctx, run, lane, info, ls, emit)
}

func flushCount(log []overlay.LogEntry) int {
	n := 0
	for _, e := range log {
		if e.Flush {
			n++
		}
	}
	return n
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

// states is the crash states to check: the one asked for, or the
// enumeration.
func (lc *laneCheck) states(info overlay.LogInfo) ([]crash.State, bool, error) {
	if lc.only == nil {
		return crash.Enumerate(info.Entries, lc.co)
	}
	st, err := crash.StateOf(info.Entries, lc.only)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", errNoState, err)
	}
	return []crash.State{st}, false, nil
}

// errNoState is states' error when the log has no Only state.
var errNoState = errors.New("the log has no such crash state")

// check checks the states of the lane's log, adding to ls.
func (lc *laneCheck) check(ctx context.Context, run *session.Run, lane string, info overlay.LogInfo, ls *LaneSummary, emit func(Result) bool) (err error) {
	flushes := flushCount(info.Entries)
	ls.Flushes += flushes
	ls.Writes += len(info.Entries) - flushes
	states, truncated, err := lc.states(info)
	if errors.Is(err, errNoState) {
		emit(Result{Lane: lane, Verdict: NoState, Output: fmt.Sprintf("%v (the log: %d writes, %d flushes)", err, ls.Writes, ls.Flushes)})
		return nil
	}
	if err != nil {
		return err
	}
	ls.Truncated = ls.Truncated || truncated
	ls.Replay = lc.tool.Name + " after a host journal replay"
	if lc.mount != nil {
		ls.Replay = "mounted in the guest (the kernel's replay), then " + lc.tool.Name
	}
	switch {
	case lc.dur == nil || strings.HasPrefix(lc.fs, "ext"):
	case lc.mount == nil:
		ls.DurableNote = "not checked on " + lc.fs + " without the guest's mount: no host reader of its files"
	case lc.dur.datasync:
		ls.DurableNote = "after fdatasync not checked on " + lc.fs + ": by inode needs a host reader of its files"
	}
	defer func() { err = errors.Join(err, lc.remountLane(ctx, run)) }()
	for k, st := range states {
		r, err := lc.checkOne(ctx, run, lane, st, ls)
		d, dead := relay.Of(ctx, err)
		switch {
		case dead && lc.t != nil:
			r = lc.died(run, st, d, ls)
		case err != nil:
			return fmt.Errorf("crash state %d (%s): %w", k, st, err)
		}
		r.Index, r.Lane, r.Session = k, lane, run.ID()
		if emit(r) || (dead && k == len(states)-1) {
			return nil // the next use of the chain replaces the dead guest
		}
		if dead {
			if run, err = lc.resume(ctx, lane, info, k, len(states), ls); run == nil || err != nil {
				return err
			}
		}
	}
	return nil
}

// died is the result of state st, whose check lost the guest of run (d),
// counted in ls; the chain's next Live replaces the guest.
func (lc *laneCheck) died(run *session.Run, st crash.State, d *relay.Death, ls *LaneSummary) Result {
	lc.t.chain.Lost(d)
	lc.laneDown = "" // the dead guest's; a fresh one has the lane mounted
	ls.States++
	ls.Dirty++
	ls.Bad++
	ls.Deaths++
	run.Log().Warn("a crash state's check lost the guest: the run goes on in a fresh session", zap.String("verdict", d.Verdict()), zap.String("death", d.Summary()))
	return Result{State: st, Verdict: d.Verdict(), Output: d.Output(), Kernel: d.Report}
}

// resume goes on after state k of n lost the guest: in a fresh session the
// trace runs again, and when the lane's write log has the shape it had
// (each entry's kind, LBA and length, in order: its bytes differ run to
// run, timestamps and generation numbers) the states after k are checked
// there: its run is returned. When the log differs, or no guest is left,
// they are counted in ls as skipped, with why, and the run is nil.
func (lc *laneCheck) resume(ctx context.Context, lane string, was overlay.LogInfo, k, n int, ls *LaneSummary) (*session.Run, error) {
	skip := func(why string) (*session.Run, error) {
		ls.Skipped += n - k - 1
		ls.SkipNote = fmt.Sprintf("%d crash states after state %d, whose check lost the guest, not checked: %s", n-k-1, k, why)
		return nil, nil
	}
	if err := lc.t.rerun(ctx, lc.ops); errors.Is(err, relay.ErrTooManyDeaths) {
		skip(err.Error())
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("the trace again in a fresh session, after crash state %d lost the guest: %w", k, err)
	}
	run := lc.t.run
	info, err := lc.log(ctx, run)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(info.Entries, was.Entries) {
		return skip(fmt.Sprintf("the trace's write log in the fresh session %s differs (%d entries, was %d)", run.ID(), len(info.Entries), len(was.Entries)))
	}
	if lc.t.bounds != nil {
		lc.bounds = lc.t.bounds[lc.i]
	}
	lc.mount = SpareMount(run, lc.i)
	lc.dur, err = durableAfter(ctx, run, lane, lc.last, flushCount(info.Entries))
	return run, err
}

// checkOne checks one state (its image sent first, when asked), counting
// it in ls.
func (lc *laneCheck) checkOne(ctx context.Context, run *session.Run, lane string, st crash.State, ls *LaneSummary) (Result, error) {
	if lc.image != nil {
		if err := sendImage(ctx, run, lc.i, lane, st, lc.image); err != nil {
			return Result{}, err
		}
	}
	var r checked
	var err error
	if lc.mount != nil {
		r, err = lc.checkMounted(ctx, run, st)
	} else {
		r, err = checkState(ctx, run, lc.i, lc.tool, st, lc.img)
	}
	if err != nil {
		return Result{}, err
	}
	if errors.Is(r.replayErr, hostfsck.ErrNoRecovery) {
		ls.Replay = lc.tool.Name + " (no journal replay on the host for this filesystem)"
	}
	if err := lc.checkDurable(&r, ls); err != nil {
		return Result{}, fmt.Errorf("durability: %w", err)
	}
	ls.States++
	if r.Verdict != Clean {
		ls.Dirty++
	}
	if Class(r.Result) != "" {
		ls.Bad++
	}
	if r.Atomicity != "" {
		ls.Atomic++
		if r.Atomicity != NotAtBoundary {
			ls.AtBoundary++
		}
	}
	return r.Result, nil
}

// imageChunk is the size of one image chunk sent.
const imageChunk = 128 << 10 // a stream buffers up to 256 messages: 32 MiB

// sendImage sends st's crash view in chunks, leaving out those of zeros,
// then an empty chunk at its end.
func sendImage(ctx context.Context, run *session.Run, i int, lane string, st crash.State, send func(string, int64, []byte, int64) error) error {
	return run.Disk(ctx, i, "send crash state image", func(d *overlay.Device) error {
		v, err := d.CrashView(st.Keep)
		if err != nil {
			return err
		}
		size := v.Size()
		buf := make([]byte, imageChunk)
		for off := int64(0); off < size; off += imageChunk {
			n, err := v.ReadAt(buf[:min(imageChunk, size-off)], off)
			if err != nil {
				return fmt.Errorf("crash state image at %d: %w", off, err)
			}
			if !allZero(buf[:n]) {
				if err := send(lane, off, bytes.Clone(buf[:n]), size); err != nil {
					return err
				}
			}
		}
		return send(lane, size, nil, size) // the end: a chunk of zeros may have been left out there
	})
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkDurable sets r.Durability for a state after the final fsync's
// flushes whose image the checker could read: from the guest's read of the
// mounted state, or on an ext* lane from the image (fsimage; by inode after
// an fdatasync).
func (lc *laneCheck) checkDurable(r *checked, ls *LaneSummary) error {
	if lc.dur == nil || r.State.Flushes < lc.dur.flushes || r.Verdict == Unmountable {
		return nil
	}
	// A state the checker cannot make sense of is not read for what was
	// durable, but on a filesystem a crash may leave for its fsck to
	// repair, where e2fsck -n gives up on a half-written directory block
	// (exit 8) as readily as it lists a leaked block: there what the fsync
	// made durable must be there whatever else the crash left.
	if repaired, _ := family.CrashRepaired(lc.fs); r.Verdict == Broken && !repaired {
		return nil
	}
	lost := r.lost
	if !r.inGuestDurable {
		if !strings.HasPrefix(lc.fs, "ext") {
			return nil
		}
		var err error
		if lost, err = checkDurable(lc.img, lc.dur); err != nil {
			return err
		}
	}
	ls.Durable++
	r.Durability = Kept
	switch {
	case lost != "" && r.nameOnly:
		ls.Unnamed++
		r.Durability = NameOnly + lost
	case lost != "":
		ls.Lost++
		r.Durability, r.Fsynced = "LOST "+lost, lc.dur.what()
	}
	return nil
}

// checked is a Result with how its journal replay went, and what the
// guest read of the durable file in the mounted state.
type checked struct {
	Result
	replayErr      error
	inGuestDurable bool   // lost was read in the guest
	lost           string // what was lost ("" none)
	nameOnly       bool   // lost only a name the fsync does not promise
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
	switch {
	case errors.Is(err, hostfsck.ErrReplayFailed):
		r.Verdict, r.Output = Broken, err.Error()
		return r, nil
	case errors.Is(err, hostfsck.ErrNoSpace):
		// The host's disk was full: the run's error, as for the image copy.
		return r, fmt.Errorf("the temp dir %s (free some there): %w: %w", filepath.Dir(filepath.Dir(img)), err, errkind.ErrExhausted)
	case err != nil && !errors.Is(err, hostfsck.ErrNoRecovery):
		// The checker failed (timed out, killed, its sandbox), not the
		// state: the run's error, as a failed fsck is, never a finding.
		return r, err
	}
	r.replayErr = err
	verdict, out, err := tool.Run(ctx, img)
	if err != nil {
		return r, err
	}
	r.Verdict = verdictOf(verdict)
	if r.Verdict != Clean {
		r.Output = hostfsck.Truncate(append(replayOut, out...), hostfsck.MaxOutput)
	}
	return r, nil
}
