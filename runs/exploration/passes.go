package exploration

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
)

// Bounds and values of PassesOptions.
const (
	MaxPasses = 100
	// PinnedClock is the guest time a pinned pass sets before op i: this
	// plus i seconds (2023-11-14 22:13:20 UTC onwards).
	PinnedClock = 1_700_000_000
)

// PassesOptions is a replay-fidelity measurement (the paper's §8, Table
// 13): Trace on Lanes (with Revert's remounts between ops), N passes from
// one checkpoint per clock mode, in a session per instruction-counting
// mode.
type PassesOptions struct {
	// Finding names the finding the lanes and trace are of ("" for a
	// trace given by hand).
	Finding string
	Lanes   []string
	Trace   []string
	Revert  string
	// Image is the guest image ("": the lanes' own).
	Image string
	// N is the passes per clock mode (2..MaxPasses).
	N int
	// Clock is "free", "pinned" or "both" ("": both); ICount "off", "on"
	// or "both" ("": off).
	Clock, ICount string
}

// PassesRow is one clock mode's passes, with or without instruction
// counting: how many distinct whole-disk hashes per lane, and RAM hashes
// (-1: the backend does not expose RAM).
type PassesRow struct {
	Clock  string
	ICount bool
	Passes int
	Disks  map[string]int
	RAM    int
}

// PassProgress says a pass begins: its clock mode, instruction counting,
// number (from 1) and the passes per mode.
type PassProgress struct {
	Clock        string
	ICount       bool
	Pass, Passes int
}

// PassesResult is what Passes measured.
type PassesResult struct {
	Finding  string
	Sessions []string // one per instruction-counting mode
	Backend  string
	Trace    []string
	Rows     []PassesRow
}

// PassesFor is o for finding f: its lanes, trace and revert.
func PassesFor(f *session.Finding, o PassesOptions) PassesOptions {
	o.Finding, o.Lanes, o.Trace, o.Revert = f.ID, f.LaneSpecs, f.Trace, f.Revert
	return o
}

// Passes runs o.Trace o.N times from one checkpoint, then sync, per clock
// mode, in a fresh session per instruction-counting mode, and counts the
// distinct disk and RAM hashes the passes leave; progress (nil: none)
// hears of each pass as it begins.
func Passes(ctx context.Context, m *session.Manager, o PassesOptions, progress func(PassProgress)) (*PassesResult, error) {
	if progress == nil {
		progress = func(PassProgress) {}
	}
	clocks, icounts, trace, err := o.validate()
	if err != nil {
		return nil, err
	}
	res := &PassesResult{Finding: o.Finding, Trace: o.Trace}
	for _, icount := range icounts {
		if err := passesSession(ctx, m, o, trace, clocks, icount, res, progress); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// validate checks o and returns its clock and icount modes and its trace
// parsed.
func (o *PassesOptions) validate() (clocks []string, icounts []bool, trace []*agentv1.Request, err error) {
	if o.N < 2 || o.N > MaxPasses {
		return nil, nil, nil, errkind.Invalid("passes", "%d: want 2 to %d", o.N, MaxPasses)
	}
	if clocks = map[string][]string{"": {"free", "pinned"}, "free": {"free"}, "pinned": {"pinned"}, "both": {"free", "pinned"}}[o.Clock]; clocks == nil {
		return nil, nil, nil, errkind.Invalid("clock", "%q: want free, pinned or both", o.Clock)
	}
	if icounts = map[string][]bool{"": {false}, "off": {false}, "on": {true}, "both": {false, true}}[o.ICount]; icounts == nil {
		return nil, nil, nil, errkind.Invalid("icount", "%q: want off, on or both", o.ICount)
	}
	if len(o.Trace) == 0 || len(o.Trace) > MaxSetup {
		return nil, nil, nil, errkind.Invalid("trace", "%d ops: want 1 to %d", len(o.Trace), MaxSetup)
	}
	if trace, err = opspec.ParseTrace(append(slices.Clone(o.Trace), "sync")); err != nil {
		return nil, nil, nil, errkind.Invalid("trace", "%v", err)
	}
	return clocks, icounts, trace, nil
}

// passesSession adds to res the rows of one session, with or without
// instruction counting: the passes of every clock mode.
func passesSession(ctx context.Context, m *session.Manager, o PassesOptions, trace []*agentv1.Request, clocks []string, icount bool, res *PassesResult, progress func(PassProgress)) error {
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: o.Lanes, Image: o.Image, ICount: icount}, "replay passes")
	if err != nil {
		return err
	}
	defer run.Close()
	res.Sessions, res.Backend = append(res.Sessions, run.ID()), run.Backend()
	err = passesOn(run.Context(), run, o, trace, clocks, icount, res, progress)
	return run.Finish(run.Context(), err)
}

// passesOn runs the passes of every clock mode on run from one
// checkpoint.
func passesOn(ctx context.Context, run *session.Run, o PassesOptions, trace []*agentv1.Request, clocks []string, icount bool, res *PassesResult, progress func(PassProgress)) error {
	root, err := run.Checkpoint(ctx, "passes root")
	if err != nil {
		return err
	}
	for _, clock := range clocks {
		row := PassesRow{Clock: clock, ICount: icount, Passes: o.N, Disks: map[string]int{}}
		disks, rams := map[string]map[string]bool{}, map[string]bool{}
		for p := range o.N {
			progress(PassProgress{Clock: clock, ICount: icount, Pass: p + 1, Passes: o.N})
			if err := run.Restore(ctx, "pass", root); err != nil {
				return err
			}
			h, err := onePass(ctx, run, o.Revert, trace, clock == "pinned")
			if err != nil {
				return fmt.Errorf("icount %v, clock %s, pass %d: %w", icount, clock, p+1, err)
			}
			for lane, sum := range h.Disks {
				if disks[lane] == nil {
					disks[lane] = map[string]bool{}
				}
				disks[lane][hex.EncodeToString(sum[:])] = true
			}
			if h.HasRAM {
				rams[hex.EncodeToString(h.RAM[:])] = true
			}
		}
		for lane, set := range disks {
			row.Disks[lane] = len(set)
		}
		if row.RAM = len(rams); row.RAM == 0 {
			row.RAM = -1
		}
		res.Rows = append(res.Rows, row)
	}
	return nil
}

// onePass applies trace (its last op the sync; the guest clock set to
// PinnedClock+i before op i when pinned; between the trace's ops what the
// search did, betweenOps) and returns the hashes. The ops'
// errnos are the trace's own business (a finding's trace may fail on a
// lane), not an error.
func onePass(ctx context.Context, run *session.Run, revert string, trace []*agentv1.Request, pinned bool) (session.Hashes, error) {
	for i, op := range trace {
		if err := passBetween(ctx, run, revert, trace, i); err != nil {
			return session.Hashes{}, err
		}
		if pinned {
			set, err := opspec.ParseRequest(fmt.Sprintf("set-clock %d", PinnedClock+i))
			if err != nil {
				return session.Hashes{}, err
			}
			if _, err := run.Apply(ctx, set); err != nil {
				return session.Hashes{}, err
			}
		}
		if _, err := run.Apply(ctx, op); err != nil {
			return session.Hashes{}, err
		}
	}
	return run.Hashes(ctx)
}

// passBetween is betweenOps for a pass, whose last op is its own sync: that
// runs in the mount of the op before it, after the walk of that op's state
// (no remount).
func passBetween(ctx context.Context, run *session.Run, revert string, trace []*agentv1.Request, i int) error {
	if i == len(trace)-1 {
		revert = RevertMachine
	}
	return betweenOps(ctx, run, revert, trace, i)
}
