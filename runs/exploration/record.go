package exploration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
)

// RecordKind is the kind of the run record an explore run saves
// (session.Run.SaveRecord): a Record as JSON.
const RecordKind = "explore/v1"

// maxTrailPoints bounds the progress points a Record keeps: the trail keeps
// report n when n is a multiple of its stride, and doubles the stride
// (dropping the points it no longer keeps) when full; the last report is
// always added at the end.
const maxTrailPoints = 1024

// Record is what an explore run keeps in the ledger when it ends, so that
// it can be drawn afterwards (themisctl report --run S): its options, its
// summary and its progress over time.
type Record struct {
	Options  Options
	Summary  Summary
	Progress []Progress
}

// trail collects the progress of a run, thinned to at most maxTrailPoints.
// It is safe for concurrent use.
type trail struct {
	mu     sync.Mutex
	points []Progress
	counts []int // the report number of each point
	stride int   // keep report n when n%stride == 0
	n      int   // reports so far
	last   Progress
}

// add takes one progress report.
func (t *trail) add(p Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	t.last = p
	t.stride = max(t.stride, 1)
	if t.n%t.stride != 0 {
		return
	}
	t.points, t.counts = append(t.points, p), append(t.counts, t.n)
	if len(t.points) < maxTrailPoints {
		return
	}
	t.stride *= 2
	points, counts := t.points[:0], t.counts[:0]
	for i, c := range t.counts {
		if c%t.stride == 0 {
			points, counts = append(points, t.points[i]), append(counts, c)
		}
	}
	t.points, t.counts = points, counts
}

// all is the thinned trail with the last report at its end.
func (t *trail) all() []Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		return nil
	}
	if k := len(t.counts); k > 0 && t.counts[k-1] == t.n {
		return slices.Clone(t.points)
	}
	return append(slices.Clone(t.points), t.last)
}

// saveRecord stores the run's Record; a failure is logged, not returned:
// the run and its findings are complete without it.
func saveRecord(ctx context.Context, run *session.Run, o Options, sum *Summary, t *trail) {
	kept := *sum
	kept.StateKeys, kept.StateDepths, kept.DeclaredKeys = nil, nil, nil // a shard's, for the merge: not drawn
	b, err := json.Marshal(Record{Options: o, Summary: kept, Progress: t.all()})
	if err == nil {
		err = run.SaveRecord(ctx, RecordKind, b)
	}
	if err != nil {
		run.Log().Warn("explore: keep the run record", zap.Error(err))
	}
}

// LoadRecord reads back the Record of the explore run of session id.
func LoadRecord(ctx context.Context, m *session.Manager, id string) (*Record, error) {
	kind, b, err := m.RunRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	if kind != RecordKind {
		return nil, fmt.Errorf("session %s: its run record is %q, not an explore run's (%s): %w", id, kind, RecordKind, errkind.ErrNotFound)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("session %s: explore run record: %w", id, err)
	}
	if r.Options.Workers < 0 {
		r.Options.Workers = 0 // auto, stored as -1 before 2026-12-04
	}
	return &r, nil
}
