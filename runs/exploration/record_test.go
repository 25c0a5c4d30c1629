package exploration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestTrail: however many reports come, the trail keeps at most
// maxTrailPoints, in order, evenly thinned, and always the last report.
func TestTrail(t *testing.T) {
	for _, n := range []int{0, 1, 5, maxTrailPoints - 1, maxTrailPoints, maxTrailPoints + 1, 10 * maxTrailPoints, 100003} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var tr trail
			for i := range n {
				tr.add(Progress{States: i + 1})
			}
			got := tr.all()
			switch {
			case n == 0 && got != nil:
				t.Fatalf("no reports: trail %v", got)
			case n == 0:
				return
			case len(got) > maxTrailPoints+1:
				t.Fatalf("%d points kept of %d, want at most %d", len(got), n, maxTrailPoints+1)
			case n <= maxTrailPoints-1 && len(got) != n:
				t.Fatalf("%d points kept of %d, want all", len(got), n)
			case got[len(got)-1].States != n:
				t.Fatalf("last point %d, want the last report %d", got[len(got)-1].States, n)
			case n > 10 && len(got) < maxTrailPoints/4:
				t.Fatalf("only %d points kept of %d", len(got), n)
			}
			gaps := map[int]bool{}
			for i := 1; i < len(got); i++ {
				d := got[i].States - got[i-1].States
				if d <= 0 {
					t.Fatalf("point %d (%d) not after %d", i, got[i].States, got[i-1].States)
				}
				if i < len(got)-1 {
					gaps[d] = true
				}
			}
			if len(gaps) > 1 {
				t.Errorf("uneven thinning: gaps %v", gaps)
			}
		})
	}
}

// TestLoadRecordAutoWorkers checks that a record stored when auto workers
// were -1 (before 2026-12-04) reads back as 0, today's auto, and that a
// count reads back as itself.
func TestLoadRecordAutoWorkers(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	ctx := context.Background()
	for _, tt := range []struct{ stored, want int }{{-1, 0}, {0, 0}, {3, 3}} {
		run, err := m.Acquire(ctx, session.CreateOptions{Lanes: []string{"ext2"}}, "explore")
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(Record{Options: Options{Lanes: []string{"ext2"}, Workers: tt.stored}})
		if err != nil {
			t.Fatal(err)
		}
		if err := run.SaveRecord(ctx, RecordKind, b); err != nil {
			t.Fatal(err)
		}
		if err := run.End(session.StateEnded, "done"); err != nil {
			t.Fatal(err)
		}
		run.Close()
		r, err := LoadRecord(ctx, m, run.ID())
		if err != nil {
			t.Fatal(err)
		}
		if r.Options.Workers != tt.want {
			t.Errorf("stored workers %d: loaded %d, want %d", tt.stored, r.Options.Workers, tt.want)
		}
	}
}
