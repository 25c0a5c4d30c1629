package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/themisfs/themis/nbd"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// ExploreBench is an explore run reduced to throughput and a per-state
// split. Split fields are milliseconds per state (cumulative time / States).
type ExploreBench struct {
	// Summary is the run's own summary.
	Summary *exploration.Summary
	// Lanes are the run's lane specs.
	Lanes []string
	// Channel is the agent channel its sessions used ("": not recorded).
	Channel string
	// States counts ops applied; StatesPerSec is the run's rate.
	States       int
	StatesPerSec float64
	// Total is the wall time per state (search elapsed / States).
	Total float64
	// Op applies the op on every lane; Fingerprint walks and folds every
	// lane; Restore restores a checkpoint; Checkpoint takes and drops them;
	// Check runs the self-references (remount, fsck).
	Op, Fingerprint, Restore, Checkpoint, Check float64
	// Backtrack is Restore + Checkpoint: what stands where the baseline
	// copies, mounts and unmounts.
	Backtrack float64
	// Other is Total less the parts: the search's own bookkeeping and the
	// minimization of findings.
	Other float64
	// Umount, Mount and Disk split Restore and Checkpoint under the
	// remount revert (exploration.Profile): the agent calls that unmount
	// and mount every lane, and the overlay pops, pushes and merges.
	// Remounts is umount-and-mount rounds per state (a count, not ms).
	Umount, Mount, Disk float64
	Remounts            float64
	// AgentOp and AgentWalk are the agent's own time in the op and the
	// walks batched with it (parts of Op); AgentUmount and AgentMount in
	// the revert's calls (parts of Umount and Mount). 0 from an agent that
	// does not report it.
	AgentOp, AgentWalk, AgentUmount, AgentMount float64
	// IO is the disks' requests per state by phase (DiskPhases order);
	// nil where the backend does not count them.
	IO []PhaseIO
}

// DiskPhases are the phases of ExploreBench.IO, in order: the step (op
// and walks), the remount revert's unmounts and mounts, the rest (checks,
// fingerprints alone, drops), and all of the search.
var DiskPhases = []string{"step", "umount", "mount", "other", "all"}

// PhaseIO is a phase's disk requests per state (NBD; nbd.Counts divided
// by the states): counts and bytes, and the host's serve time in ms.
type PhaseIO struct {
	Phase                                                   string
	Requests, Reads, ReadBytes, Writes, WriteBytes          float64
	WriteZeroes, WriteZeroesBytes, Flushes, Rejected, Serve float64
}

// phaseIO is c per state.
func phaseIO(phase string, c nbd.Counts, n int) PhaseIO {
	per := func(v int64) float64 { return float64(v) / float64(n) }
	return PhaseIO{Phase: phase, Requests: per(c.Requests()), Reads: per(c.Reads), ReadBytes: per(c.ReadBytes),
		Writes: per(c.Writes), WriteBytes: per(c.WriteBytes), WriteZeroes: per(c.WriteZeroes),
		WriteZeroesBytes: per(c.WriteZeroesBytes), Flushes: per(c.Flushes), Rejected: per(c.Rejected),
		Serve: perState(c.Serve, n)}
}

// Explore runs exploration.Run with o and returns its throughput and per-state
// split. A run that applied no op, was cancelled, or whose guest died is an
// error: there is nothing to measure, or the measure is cut short.
func Explore(ctx context.Context, m *session.Manager, o exploration.Options) (*ExploreBench, error) {
	s, err := exploration.Run(ctx, m, o, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: explore: %w", err)
	}
	switch s.Stopped {
	case "cancelled":
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench: explore: stopped after %d states: %w", s.States, err)
		}
		return nil, fmt.Errorf("bench: explore: cancelled after %d states", s.States)
	case "guest-died":
		return nil, fmt.Errorf("bench: explore: the guest died after %d states (session %s)", s.States, s.Session)
	}
	if s.States == 0 {
		return nil, errors.New("bench: explore: the run applied no op")
	}
	return exploreBench(s, o.Lanes), nil
}

// exploreBench reduces a summary.
func exploreBench(s *exploration.Summary, lanes []string) *ExploreBench {
	n := s.States
	b := &ExploreBench{
		Summary:      s,
		Lanes:        append([]string(nil), lanes...),
		States:       n,
		StatesPerSec: s.StatesPerSec,
		Total:        perState(s.Elapsed, n),
		Op:           perState(s.OpTime, n),
		Fingerprint:  perState(s.FingerprintTime, n),
		Restore:      perState(s.RestoreTime, n),
		Checkpoint:   perState(s.CheckpointTime, n),
		Check:        perState(s.CheckTime, n),
	}
	b.Backtrack = b.Restore + b.Checkpoint
	b.Other = max(0, b.Total-b.Op-b.Fingerprint-b.Restore-b.Checkpoint-b.Check)
	p := s.Profile
	b.Umount, b.Mount, b.Disk = perState(p.Umount, n), perState(p.Mount, n), perState(p.Disk, n)
	if n > 0 {
		b.Remounts = float64(p.Remounts) / float64(n)
	}
	b.AgentOp, b.AgentWalk = perState(p.AgentOp, n), perState(p.AgentWalk, n)
	b.AgentUmount, b.AgentMount = perState(p.AgentUmount, n), perState(p.AgentMount, n)
	if p.IOAll.Requests() > 0 && n > 0 {
		for i, c := range []nbd.Counts{p.IOStep, p.IOUmount, p.IOMount, p.IOOther(), p.IOAll} {
			b.IO = append(b.IO, phaseIO(DiskPhases[i], c, n))
		}
	}
	return b
}

// Comparison puts an explore run beside the baseline.
type Comparison struct {
	Explore  *ExploreBench
	Baseline *BaselineResult
	// ThemisMsPerState and BaselineMsPerState are the whole wall time per
	// state of each.
	ThemisMsPerState, BaselineMsPerState float64
	// Ratio is BaselineMsPerState / ThemisMsPerState: above 1, Themis
	// explores faster per state than the baseline; below 1, slower.
	Ratio float64
	// ThemisBacktrackMs (restore + checkpoint) and BaselineBacktrackMs
	// (copy in + mount + umount + copy out) are the backtracking part per
	// state; BacktrackRatio is baseline / Themis.
	ThemisBacktrackMs, BaselineBacktrackMs, BacktrackRatio float64
}

// Compare puts e beside b.
func Compare(e *ExploreBench, b *BaselineResult) Comparison {
	c := Comparison{Explore: e, Baseline: b}
	if e != nil {
		c.ThemisMsPerState, c.ThemisBacktrackMs = e.Total, e.Backtrack
	}
	if b != nil {
		c.BaselineMsPerState, c.BaselineBacktrackMs = b.MsPerState(), b.Split().Backtrack
	}
	c.Ratio = ratio(c.BaselineMsPerState, c.ThemisMsPerState)
	c.BacktrackRatio = ratio(c.BaselineBacktrackMs, c.ThemisBacktrackMs)
	return c
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// String renders c as a table: one column per system, one row per part.
func (c Comparison) String() string {
	return render([]Comparison{c}, c.Baseline)
}

// render is the side-by-side table: one column per explore run (its
// backend and revert), the baseline last, one row per part, then each
// run's ratios.
func render(runs []Comparison, b *BaselineResult) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	var bs BaselineSplit
	bl, bstates, brate, bimg := "-", 0, 0.0, "-"
	if b != nil {
		bs = b.Split()
		bl, bstates, bimg = b.Lane, b.States, fmt.Sprintf("%d KiB", b.ImageBytes>>10)
		if bs.Total > 0 {
			brate = 1000 / bs.Total
		}
	}
	es := make([]*ExploreBench, len(runs))
	for i, c := range runs {
		es[i] = c.Explore
		if es[i] == nil {
			es[i] = &ExploreBench{}
		}
	}
	ms := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	row := func(name string, themis func(e *ExploreBench) string, base string) {
		fmt.Fprintf(w, "%s\t", name)
		for _, e := range es {
			fmt.Fprintf(w, "%s\t", themis(e))
		}
		fmt.Fprintf(w, "%s\t\n", base)
	}
	row("ms per state", columnName, "baseline (loop remount)")
	row("lanes", func(e *ExploreBench) string { return strings.Join(e.Lanes, ",") }, bl)
	row("image", func(*ExploreBench) string { return "-" }, bimg)
	row("states", func(e *ExploreBench) string { return fmt.Sprint(e.States) }, fmt.Sprint(bstates))
	row("states/s", func(e *ExploreBench) string { return fmt.Sprintf("%.1f", e.StatesPerSec) }, fmt.Sprintf("%.1f", brate))
	row("total", func(e *ExploreBench) string { return ms(e.Total) }, ms(bs.Total))
	row("op", func(e *ExploreBench) string { return ms(e.Op) }, ms(bs.Op))
	row("fingerprint", func(e *ExploreBench) string { return ms(e.Fingerprint) }, "-")
	row("restore / copy in", func(e *ExploreBench) string { return ms(e.Restore) }, ms(bs.Restore))
	row("checkpoint / copy out", func(e *ExploreBench) string { return ms(e.Checkpoint) }, ms(bs.Store))
	row("mount", func(e *ExploreBench) string { return ms(e.Mount) }, ms(bs.Mount))
	row("umount", func(e *ExploreBench) string { return ms(e.Umount) }, ms(bs.Umount))
	row("checks", func(e *ExploreBench) string { return ms(e.Check) }, "-")
	row("other", func(e *ExploreBench) string { return ms(e.Other) }, ms(max(0, bs.Total-bs.Op-bs.Backtrack)))
	row("backtrack", func(e *ExploreBench) string { return ms(e.Backtrack) }, ms(bs.Backtrack))
	// The profile: parts of the rows above (exploration.Profile).
	row("overlay pop/push/merge", func(e *ExploreBench) string { return ms(e.Disk) }, "-")
	row("remounts per state", func(e *ExploreBench) string { return fmt.Sprintf("%.2f", e.Remounts) }, "-")
	row("agent: op", func(e *ExploreBench) string { return ms(e.AgentOp) }, "-")
	row("agent: walk", func(e *ExploreBench) string { return ms(e.AgentWalk) }, "-")
	row("agent: umount", func(e *ExploreBench) string { return ms(e.AgentUmount) }, "-")
	row("agent: mount", func(e *ExploreBench) string { return ms(e.AgentMount) }, "-")
	for i, phase := range DiskPhases {
		io := func(e *ExploreBench) (PhaseIO, bool) {
			if i < len(e.IO) {
				return e.IO[i], true
			}
			return PhaseIO{}, false
		}
		row("nbd "+phase+": requests (r/w/z/f)", func(e *ExploreBench) string {
			p, ok := io(e)
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.1f (%.1f/%.1f/%.1f/%.1f)", p.Requests, p.Reads, p.Writes, p.WriteZeroes, p.Flushes)
		}, "-")
		row("nbd "+phase+": KiB read/written, serve ms", func(e *ExploreBench) string {
			p, ok := io(e)
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.1f/%.1f, %.3f", p.ReadBytes/1024, (p.WriteBytes+p.WriteZeroesBytes)/1024, p.Serve)
		}, "-")
	}
	w.Flush()
	for i, c := range runs {
		fmt.Fprintf(&sb, "baseline/%s: %.3gx per state, %.3gx per backtrack (above 1: themis faster)\n", columnName(es[i]), c.Ratio, c.BacktrackRatio)
	}
	return sb.String()
}

// columnName names an explore run's column: "themis (qemu)", or with its
// revert "themis (qemu, remount)", its channel and, past one, its workers
// "themis (qemu, remount, virtio, 2 workers)".
func columnName(e *ExploreBench) string {
	switch {
	case e.Summary == nil:
		return "themis (-)"
	case e.Summary.Revert == "":
		return fmt.Sprintf("themis (%s)", e.Summary.Backend)
	case e.Channel == "":
		return fmt.Sprintf("themis (%s, %s)", e.Summary.Backend, e.Summary.Revert)
	case e.Summary.Workers > 1:
		return fmt.Sprintf("themis (%s, %s, %s, %d workers)", e.Summary.Backend, e.Summary.Revert, e.Channel, e.Summary.Workers)
	}
	return fmt.Sprintf("themis (%s, %s, %s)", e.Summary.Backend, e.Summary.Revert, e.Channel)
}

// Report is a baseline and one explore run per revert strategy, measured
// in one call.
type Report struct {
	Baseline *BaselineResult
	// Runs are the explore runs in Options.Reverts order, each compared
	// with Baseline.
	Runs []Comparison
}

// String renders r as one table, a column per run and the baseline.
func (r Report) String() string { return render(r.Runs, r.Baseline) }

// Options are the inputs of Run.
type Options struct {
	// Explore is the explore run to measure; its Revert is set from
	// Reverts.
	Explore exploration.Options
	// Reverts are the revert strategies to measure, one explore run each
	// per channel, in order (default DefaultReverts).
	Reverts []string
	// Channels are the agent channels to measure (default
	// DefaultChannels); Run asks its manager function for one manager per
	// channel.
	Channels []vmm.AgentChannel
	// Workers are the worker counts to measure, one explore run each per
	// channel and revert (default 1; exploration.Options.Workers).
	Workers []int
	// Baseline is the baseline to put beside it; an empty Lane takes the
	// explore run's first lane spec, so both use the same filesystem and
	// image size.
	Baseline BaselineOptions
}

// DefaultReverts are the strategies Run measures by default.
var DefaultReverts = []string{exploration.RevertMachine, exploration.RevertRemount}

// DefaultChannels are the agent channels Run measures by default.
var DefaultChannels = []vmm.AgentChannel{vmm.AgentVirtio, vmm.AgentUART}

// Managers gives Run the session manager whose sessions use an agent
// channel (session.Config.AgentChannel); Run does not close it.
type Managers func(ctx context.Context, ch vmm.AgentChannel) (*session.Manager, error)

// Run measures the baseline and an explore run per channel and revert
// strategy one after the other, in one call, and compares each with the
// baseline.
func Run(ctx context.Context, managers Managers, o Options) (*Report, error) {
	if o.Baseline.Lane == "" && len(o.Explore.Lanes) > 0 {
		o.Baseline.Lane = o.Explore.Lanes[0]
	}
	reverts, channels := o.Reverts, o.Channels
	if len(reverts) == 0 {
		reverts = DefaultReverts
	}
	if len(channels) == 0 {
		channels = DefaultChannels
	}
	workers := o.Workers
	if len(workers) == 0 {
		workers = []int{1}
	}
	b, err := Baseline(ctx, o.Baseline)
	if err != nil {
		return nil, err
	}
	r := &Report{Baseline: b}
	for _, ch := range channels {
		m, err := managers(ctx, ch)
		if err != nil {
			return nil, fmt.Errorf("bench: channel %s: %w", ch, err)
		}
		for _, rv := range reverts {
			for _, n := range workers {
				eo := o.Explore
				eo.Revert, eo.Workers = rv, n
				e, err := Explore(ctx, m, eo)
				if err != nil {
					return nil, fmt.Errorf("%w (channel %s, revert %s, %d workers)", err, ch, rv, n)
				}
				e.Channel = string(ch)
				r.Runs = append(r.Runs, Compare(e, b))
			}
		}
	}
	return r, nil
}
