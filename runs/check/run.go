package check

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
)

// minClock is the least the clock part gets (within the budget): its plan
// is bounded, about 40 s for three lanes on a quiet 2-core machine, and a
// quarter of a short budget on a loaded one cut it before the cells that
// matter.
const minClock = time.Minute

// MinPartBudget is the least share a part runs with; a part whose share
// is smaller is skipped ("no budget left").
const MinPartBudget = 5 * time.Second

// maxCells bounds the clock cells against their rule a Part keeps (all
// are counted and sent).
const maxCells = 256

// StopCancelled is Summary.Stopped when ctx ended the check.
const StopCancelled = "cancelled"

// Summary is what a check did: every planned part, run or skipped, in
// order.
type Summary struct {
	// Lanes are the lanes under test; Reference the lane the differential
	// added ("" none) and ReferenceWhy why that one.
	Lanes                   []string
	Reference, ReferenceWhy string
	Parts                   []Part
	// Findings adds up the parts'; Failed counts the parts that failed.
	Findings, Failed int
	// Budget is the check's; Elapsed its wall time.
	Budget, Elapsed time.Duration
	// Stopped is StopCancelled when the check was cancelled ("" it ran
	// every part it planned).
	Stopped string
	// Parallel is how many parts ran at once (Options.Parallel or auto),
	// ParallelWhy why that many.
	Parallel    int
	ParallelWhy string
}

// Sinks receive a check's events as they happen (any may be nil). Calls
// come one at a time, from the goroutines of the parts running side by
// side.
type Sinks struct {
	// Started: a part begins (its Budget set).
	Started func(*Part)
	// Progress: an explore part's progress.
	Progress func(*Part, exploration.Progress)
	// Found: an explore part's finding, the moment it is found and again
	// when minimized (exploration.Run's found).
	Found func(*Part, session.Finding)
	// Cell: a clock cell whose verdict is not the lane's rule's.
	Cell func(*Part, clocksweep.Cell)
	// Done: a part ended, ran or skipped.
	Done func(*Part)
}

// Run plans the check of o.Lanes and runs its parts, up to a schedule's
// slots at once (package doc), each in sessions of its own. A part that
// fails is recorded (Part.Err) and the check goes on; a cancelled ctx
// skips the parts not started and returns the summary (Stopped
// StopCancelled) with a nil error. Bad options are a FieldError.
func Run(ctx context.Context, m *session.Manager, o Options, out Sinks) (*Summary, error) {
	p, err := validate(&o)
	if err != nil {
		return nil, err
	}
	if err := m.CheckImage(o.Image); err != nil {
		return nil, err
	}
	sum := &Summary{Lanes: o.Lanes, Reference: p.reference, ReferenceWhy: p.referenceWhy, Budget: o.Budget}
	sum.Parallel, sum.ParallelWhy = sideBySide(m, o, p.parts)
	if o.Workers == 0 && sum.Parallel > 1 {
		o.Workers = 1 // the parts side by side are the guests a host has room for
	}
	out = out.serialized()
	start := time.Now()
	sched := newSchedule(sum.Parallel, o.Budget, start.Add(o.Budget))
	var wg sync.WaitGroup
	for i := range p.parts {
		part := &p.parts[i]
		if part.Skipped == "" && !sched.take(ctx) {
			part.Skipped, sum.Stopped = StopCancelled, StopCancelled
		}
		if part.Skipped == "" {
			if part.Budget = sched.start(p.parts[i:], time.Now()); part.Budget < MinPartBudget {
				part.Skipped = "no budget left"
				sched.release(part)
			}
		}
		if part.Skipped != "" {
			call(out.Done, part)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(out.Started, part)
			t0 := time.Now()
			if err := runPart(ctx, m, o, part, out); err != nil {
				part.Err = err.Error()
			}
			part.Elapsed = time.Since(t0)
			sched.release(part)
			call(out.Done, part)
		}()
	}
	wg.Wait()
	for i := range p.parts {
		sum.Findings += p.parts[i].Findings
		if p.parts[i].Err != "" {
			sum.Failed++
		}
	}
	if ctx.Err() != nil {
		sum.Stopped = StopCancelled
	}
	sum.Parts, sum.Elapsed = p.parts, time.Since(start)
	return sum, nil
}

func call(f func(*Part), p *Part) {
	if f != nil {
		f(p)
	}
}

// runPart runs one part and fills its results.
func runPart(ctx context.Context, m *session.Manager, o Options, part *Part, out Sinks) error {
	if part.Kind == KindClock {
		return runClock(ctx, m, o, part, out)
	}
	return runExplore(ctx, m, o, part, out)
}

// Walk rounds of an explore part, after its full tree: walkRoots walks of
// up to walkDepth ops each, a fresh seed per round.
const (
	walkRoots = 32
	walkDepth = 10
)

// runExplore runs an explore part: the full tree to o.Depth, then, while
// a run covers its bounded space with time of the part's share left,
// rounds of bounded random walks to walkDepth (explore.Config.Walks), each
// with the next seed. A finding a later run finds again (its signature) is
// recorded in the ledger (seen once more) but not sent again nor counted
// twice.
func runExplore(ctx context.Context, m *session.Manager, o Options, part *Part, out Sinks) error {
	end := time.Now().Add(part.Budget)
	seen := newSignatures()
	for round := 0; ; round++ {
		eo := exploreOptions(o, part, time.Until(end))
		if round > 0 {
			eo.Depth, eo.Walks, eo.Seed = walkDepth, walkRoots, o.Seed+uint64(round)
		}
		if round%2 == 0 && part.SetupFailed == "" {
			eo.Setup = rootOf(part.Kind)
		}
		s, err := exploration.Run(ctx, m, eo, func(pr exploration.Progress) {
			if out.Progress != nil {
				out.Progress(part, pr)
			}
		}, func(f session.Finding) {
			if seen.fresh(f) && out.Found != nil {
				out.Found(part, f)
			}
		})
		seen.endRun()
		if errors.Is(err, exploration.ErrSetup) && part.SetupFailed == "" {
			// The filesystem refused an op of the populated root: the
			// round again, and every round after it, from the empty root.
			part.SetupFailed = err.Error()
			round--
			continue
		}
		if s != nil {
			part.Explore, part.Stopped, part.Depth, part.Walks = s, s.Stopped, eo.Depth, round
			part.UnconfirmedHangs += s.UnconfirmedHangs
			part.Sessions = append(part.Sessions, s.Sessions...)
		}
		part.Findings = seen.count()
		if err != nil || s == nil || s.Stopped != "" || time.Until(end) < MinPartBudget {
			return err
		}
	}
}

// populatedRoot is the tree an explore part's full tree, and every other
// round of its walks, start from (the other rounds from the empty root):
// pool names only (explore.DefaultPool), so that the ops drawn reach them —
// directories at two levels, a file in each, files small (inline data)
// and past a few blocks, an empty one. ACE's workloads begin with the
// setup their core ops need; from this root a depth-2 tree reaches what
// needs a parent and a child first (a rename of a directory into another
// parent, an exchange of entries of two directories).
var populatedRoot = mustParse(
	"mkdir d-00 0755", "mkdir d-01 0755", "mkdir d-00/d-00 0755",
	"write f-00 0 1000 0x61 creat", "write f-01 0 9000 0x62 creat", "create f-02 0644",
	"write d-00/f-00 0 3000 0x63 creat", "write d-01/f-01 0 1 0x64 creat",
)

// durableRoot is populatedRoot synced: the root of the single-lane parts.
// The crash part's crash states then hold the tree whole (a fsync of a
// file in d-00 is checked against a durable d-00, as CrashMonkey
// persists its workloads' setup), and the reference part's files have
// their blocks allocated (delayed allocation done), as a remount leaves
// them. The differential keeps the tree in the page cache, as measured.
var durableRoot = append(slices.Clone(populatedRoot), mustParse("sync")...)

// rootOf is the populated root of a part of kind.
func rootOf(kind string) []*agentv1.Request {
	if kind == KindDifferential {
		return populatedRoot
	}
	return durableRoot
}

func mustParse(ops ...string) []*agentv1.Request {
	out, err := opspec.ParseTrace(ops)
	if err != nil {
		panic("check: populated root: " + err.Error())
	}
	return out
}

// exploreOptions are an explore part's run with left of its share.
func exploreOptions(o Options, part *Part, left time.Duration) exploration.Options {
	eo := exploration.Options{
		Lanes: part.Lanes, Image: o.Image, Backend: o.Backend, MemoryMiB: o.MemoryMiB,
		Depth: o.Depth, Seed: o.Seed, Workers: o.Workers, MaxDuration: left, Ops: checkOps,
	}
	switch part.Kind {
	case KindReference:
		eo.Remount, eo.Fsck = true, part.fsck
	case KindCrash:
		eo.Crash = &exploration.CrashOptions{}
		eo.Ops = append(slices.Clone(checkOps), explore.OpSetPersistence)
	}
	return eo
}

// checkOps are the explore parts' op kinds: Metis's, renameat2's flags,
// the far sizes (which the family table leaves out of the differential:
// they run in the reference and crash parts, of one lane) and the
// colliding-name burst; the crash part adds the persistence ops.
var checkOps = []string{explore.OpSetMetis, explore.OpSetRenameFlags, explore.OpSetFar, explore.OpCollide, explore.OpRegrow}

// signatures are an explore part's findings by signature, across its
// runs: the latest version of each finding of the run going on, and the
// signatures earlier runs found.
type signatures struct {
	earlier map[string]bool
	current map[string]session.Finding // by ID
	counted map[string]bool            // signatures of findings not duplicates
}

func newSignatures() *signatures {
	return &signatures{earlier: map[string]bool{}, current: map[string]session.Finding{}, counted: map[string]bool{}}
}

func signatureOf(f session.Finding) string {
	if f.Signature != "" {
		return f.Signature
	}
	return f.Kind + "\x00" + f.Detail
}

// fresh records f and reports whether it is not one an earlier run found.
func (s *signatures) fresh(f session.Finding) bool {
	if s.earlier[signatureOf(f)] {
		return false
	}
	s.current[f.ID] = f
	return true
}

// endRun closes a run: its findings' signatures are earlier ones now.
func (s *signatures) endRun() {
	for _, f := range s.current {
		s.earlier[signatureOf(f)] = true
		if f.DuplicateOf == "" {
			s.counted[signatureOf(f)] = true
		}
	}
	clear(s.current)
}

// count is the distinct signatures found so far, duplicates aside.
func (s *signatures) count() int { return len(s.counted) }

// runClock runs the clock part: the sweep under the part's budget, its
// cells against the lanes' rules kept as findings.
func runClock(ctx context.Context, m *session.Manager, o Options, part *Part, out Sinks) error {
	cctx, cancel := context.WithTimeout(ctx, part.Budget)
	defer cancel()
	s, err := clocksweep.Run(cctx, m, clocksweep.Options{Lanes: part.Lanes, Image: o.Image, Backend: o.Backend, MemoryMiB: o.MemoryMiB},
		func(c clocksweep.Cell) {
			if !AgainstRule(c) {
				return
			}
			part.Findings++
			if len(part.Cells) < maxCells {
				part.Cells = append(part.Cells, c)
			}
			if out.Cell != nil {
				out.Cell(part, c)
			}
		})
	part.Sweep = s
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		part.Stopped = "budget"
		return nil
	}
	if err != nil && ctx.Err() != nil {
		part.Stopped = StopCancelled
		return nil
	}
	return err
}

// AgainstRule reports whether a clock cell is a finding: the lane's rule
// expects a verdict (a probe's cells have none) and the cell has another.
func AgainstRule(c clocksweep.Cell) bool {
	return c.Expected != "" && c.Verdict != c.Expected
}
