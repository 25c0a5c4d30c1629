package crashcheck

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/session"
)

// Of is what a crash finding is made of.
type Of struct {
	// Spec is the lane's spec, FS its filesystem.
	Spec, FS string
	// Setup ran before the log's checkpoint, with a sync after it when
	// SetupSync.
	Setup     []string
	SetupSync bool
	// Trace ran under the log; Last is its last op (the persistence
	// point).
	Trace []string
	Last  *agentv1.Request
	// Result is the state the finding is about; Lane the counts of the
	// lane's states of this trace.
	Result Result
	Lane   LaneSummary
}

// NewFinding is the crash finding of in (ID and Created set; Session left
// to RecordFinding).
func NewFinding(in Of) (*session.Finding, error) {
	id, err := session.NewFindingID()
	if err != nil {
		return nil, err
	}
	f := &session.Finding{ID: id, Kind: session.KindCrash, Trace: slices.Clone(in.Trace), FoundTrace: slices.Clone(in.Trace),
		OriginalLen: len(in.Trace), Created: time.Now().UTC(), LaneSpecs: []string{in.Spec}, Revert: "machine",
		Signature: signatureOf(in), Kernel: in.Result.Kernel}
	f.Crash = &session.CrashPoint{Lane: in.Result.Lane, Setup: slices.Clone(in.Setup), SetupSync: in.SetupSync}
	setPoint(f, in.Result, in.Lane)
	return f, nil
}

// signatureOf is the signature of in's finding: its class, filesystem and
// last op, what a lost fsync had made durable, a kernel report's
// signature.
func signatureOf(in Of) string {
	sig := fmt.Sprintf("crash %s %s after %s", Class(in.Result), in.FS, lastKind(in.Last))
	if Class(in.Result) == "lost" && in.Result.Fsynced != "" {
		sig += " of " + in.Result.Fsynced
	}
	if k := in.Result.Kernel; k != nil {
		sig += ": " + k.Signature()
	}
	return sig
}

// setPoint sets f's crash state and detail from r, of a trace whose lane
// counts are ls.
func setPoint(f *session.Finding, r Result, ls LaneSummary) {
	c := f.Crash
	c.Keep, c.Flushes, c.Kind, c.Epoch = slices.Clone(r.State.Keep), r.State.Flushes, r.State.Kind, slices.Clone(r.State.Epoch)
	c.Writes, c.LogFlushes, c.States, c.NotClean = ls.Writes, ls.Flushes, ls.States, ls.Bad
	c.Verdict, c.Durability, c.Output = r.Verdict, r.Durability, r.Output
	what := firstProblem(r.Output)
	switch Class(r) {
	case "lost":
		what = r.Durability
	case "not-atomic":
		what = "equal to no op boundary's state"
	case KernelCrash:
		what = r.Kernel.Summary()
	case Hung, Died:
		what = r.Output
	}
	f.Detail = fmt.Sprintf("lane %s, crash %s: %s: %s (%d of %d crash states bad)", r.Lane, r.State, r.Verdict, what, c.NotClean, c.States)
	if isDeath(r) && r.Session != "" {
		f.Detail += fmt.Sprintf("; the guest of session %s was lost checking it, the run went on in a fresh one", r.Session)
	}
}

// Class is what a bad result is: its death's verdict (KernelCrash, Hung,
// Died: the check lost the guest), "lost" (what was made durable is not
// there), "not-clean" (dirty, unmountable, or the checker could not read
// it) or "not-atomic"; "" for a good one (or NoState: none checked).
func Class(r Result) string {
	switch {
	case isDeath(r):
		return r.Verdict
	case strings.HasPrefix(r.Durability, "LOST"):
		return "lost"
	case r.Verdict == Dirty || r.Verdict == Broken || r.Verdict == Unmountable:
		return "not-clean"
	case r.Atomicity == NotAtBoundary:
		return "not-atomic"
	}
	return ""
}

// isDeath reports whether r's check lost the guest.
func isDeath(r Result) bool {
	return r.Verdict == KernelCrash || r.Verdict == Hung || r.Verdict == Died
}

func lastKind(op *agentv1.Request) string {
	if k := explore.OpKind(op); k != "" {
		return k
	}
	return "op"
}

// progressLine matches a checker's lines that are not problems: e2fsck's
// banner and passes, btrfs check's steps and banner lines.
var progressLine = regexp.MustCompile(`^(Pass \d|\[\d+/\d+\]|e2fsck \d|Opening filesystem|Checking filesystem|UUID:|Warning: skipping journal recovery)`)

// firstProblem is the first line of a checker's output that is not a
// progress line, cut to 200 bytes.
func firstProblem(out string) string {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || progressLine.MatchString(line) {
			continue
		}
		if len(line) > 200 {
			line = line[:200] + "…"
		}
		return line
	}
	return "no output"
}

// Pick is the state a finding of a lane's bad results of one trace is
// about: one that lost what was made durable first, else the not-clean one
// with the most flushes completed (the first of them): the crash latest
// in the trace.
func Pick(bad []Result) Result {
	best := bad[0]
	for _, r := range bad[1:] {
		switch {
		case Class(best) == "lost":
			return best
		case Class(r) == "lost" || r.State.Flushes > best.State.Flushes:
			best = r
		}
	}
	return best
}

// recorder records a run's crash findings and minimizes them, in the
// run's first session (Summary.Session), whichever session found them.
type recorder struct {
	run       *session.Run
	ctx       context.Context // not cancelled with the run: findings are kept
	specs, fs []string
	setup     []string
	setupSync bool
	send      func(session.Finding)
	found     []found
	errs      []error
}

// found is a recorded finding and the lane's results it came from; death:
// it is about a state whose check lost the guest.
type found struct {
	f     *session.Finding
	bad   badLane
	death bool
}

// record stores the findings of b: one of its bad states (Pick), one of
// its deaths (the first), each when it has any.
func (rc *recorder) record(b badLane) {
	if len(b.results) > 0 {
		rc.recordOne(b, Pick(b.results))
	}
	if len(b.deaths) > 0 {
		rc.recordOne(b, b.deaths[0])
	}
}

// recordOne stores the finding of r, one of b's.
func (rc *recorder) recordOne(b badLane, r Result) {
	f, err := NewFinding(Of{Spec: rc.specs[b.lane], FS: rc.fs[b.lane], Setup: rc.setup, SetupSync: rc.setupSync,
		Trace: b.trace, Last: b.ops[len(b.ops)-1], Result: r, Lane: b.ls})
	if err == nil {
		err = rc.run.RecordFinding(rc.ctx, f)
	}
	if err != nil {
		rc.errs = append(rc.errs, err)
		return
	}
	rc.found = append(rc.found, found{f: f, bad: b, death: isDeath(r)})
	rc.run.Event(rc.ctx, "finding", fmt.Sprintf("%s %s: %s", f.ID, f.Kind, f.Detail), nil)
	rc.emit(f)
}

func (rc *recorder) emit(f *session.Finding) {
	if rc.send != nil {
		c := *f
		cp := *f.Crash
		c.Crash = &cp
		c.Trace, c.FoundTrace, c.LaneSpecs = slices.Clone(f.Trace), slices.Clone(f.FoundTrace), slices.Clone(f.LaneSpecs)
		rc.send(c)
	}
}

func (rc *recorder) err() error { return errors.Join(rc.errs...) }
