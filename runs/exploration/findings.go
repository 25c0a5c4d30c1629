package exploration

import (
	"context"
	"fmt"
	"slices"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
)

// findingRecorder stores a run's findings in the ledger as explore
// reports them (explore.Config.Found, then Minimized) and passes each
// stored version to the caller. It is used only from the goroutine running
// the Checker.
type findingRecorder struct {
	run    *session.Run
	ctx    context.Context // not cancelled with the run: findings are kept
	specs  []string
	revert string                // the run's revert strategy, recorded with each finding
	policy string                // the name of the run's canonicalization policy, too
	send   func(session.Finding) // the caller's found; may be nil
	setup  []string              // Options.Setup, written: every trace starts with it

	byID map[int]*session.Finding // by explore's Finding.ID
	errs []error                  // ledger failures, returned at the end of the run
}

// found records a finding the moment the search finds it, trace as found.
func (r *findingRecorder) found(f explore.Finding) {
	id, err := session.NewFindingID()
	if err != nil {
		r.errs = append(r.errs, err)
		return
	}
	trace := r.trace(f.Trace)
	fd := &session.Finding{
		ID: id, Kind: f.Kind, Detail: f.Detail,
		Trace: trace, FoundTrace: slices.Clone(trace), Path: f.Path, Field: f.Field, Seed: f.Seed,
		Minimized: f.Minimized, OriginalLen: f.OriginalLen + len(r.setup), Created: time.Now().UTC(),
		LaneSpecs: slices.Clone(r.specs), Lanes: laneResults(f.Lanes), Revert: r.revert, Policy: r.policy, Signature: f.Signature(),
		Kernel: f.Kernel,
	}
	if err := r.run.RecordFinding(r.ctx, fd); err != nil {
		r.errs = append(r.errs, err)
		return
	}
	r.byID[f.ID] = fd
	r.run.Event(r.ctx, "finding", fmt.Sprintf("%s %s: %s", fd.ID, fd.Kind, fd.Detail), fd.Lanes)
	r.emit(fd)
}

// minimized updates a recorded finding with its minimized trace.
func (r *findingRecorder) minimized(f explore.Finding) {
	fd := r.byID[f.ID]
	if fd == nil {
		return // its first record failed (already in errs)
	}
	fd.Detail, fd.Trace, fd.Path, fd.Field, fd.Lanes = f.Detail, r.trace(f.Trace), f.Path, f.Field, laneResults(f.Lanes)
	fd.Minimized, fd.DuplicateOf = f.Minimized, ""
	if f.Kernel != nil {
		fd.Kernel = f.Kernel // the report of the minimized trace's last try
	}
	if f.Found != nil {
		fd.FoundTrace = r.trace(f.Found)
		fd.OriginalLen = len(fd.FoundTrace)
	}
	if dup := r.byID[f.DuplicateOf]; f.DuplicateOf != 0 && dup != nil {
		fd.DuplicateOf = dup.ID
	}
	if err := r.run.UpdateFinding(r.ctx, fd); err != nil {
		r.errs = append(r.errs, err)
		return
	}
	detail := fmt.Sprintf("%s: %d ops as found, %d minimized", fd.ID, fd.OriginalLen, len(fd.Trace))
	switch {
	case !fd.Minimized:
		detail = fmt.Sprintf("%s: not minimized: %s", fd.ID, fd.Detail)
	case fd.DuplicateOf != "":
		detail += ", duplicate of " + fd.DuplicateOf
	}
	r.run.Event(r.ctx, "finding.minimized", detail, fd.Lanes)
	r.emit(fd)
}

// trace is a search trace as recorded: the setup's ops, then its own.
func (r *findingRecorder) trace(ops []*agentv1.Request) []string {
	return slices.Concat(r.setup, opspec.FormatTrace(ops))
}

func (r *findingRecorder) emit(fd *session.Finding) {
	if r.send != nil {
		c := *fd
		c.Trace, c.FoundTrace, c.Lanes, c.LaneSpecs = slices.Clone(fd.Trace), slices.Clone(fd.FoundTrace), slices.Clone(fd.Lanes), slices.Clone(fd.LaneSpecs)
		r.send(c)
	}
}

// distinct counts the recorded findings that are not duplicates.
func (r *findingRecorder) distinct() int {
	n := 0
	for _, fd := range r.byID {
		if fd.DuplicateOf == "" {
			n++
		}
	}
	return n
}

func laneResults(ls []explore.LaneResult) []session.LaneResult {
	var out []session.LaneResult
	for _, l := range ls {
		out = append(out, session.LaneResult{Lane: l.Lane, Errno: l.Errno})
	}
	return out
}
