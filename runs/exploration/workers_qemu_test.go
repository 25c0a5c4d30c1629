package exploration

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestExploreWorkersRealGuest is issue 15's check: explore ext2 to depth 2
// with seed 7 on one worker and on two (two real guests, one search):
// the same unique states, digest and findings; the time of each is
// logged (docs/benchmarks.md). Each worker's session ends with the run.
func TestExploreWorkersRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var sums []*Summary
	for _, n := range []int{1, 2} {
		s, err := Run(ctx, m, Options{Lanes: []string{"ext2"}, Depth: 2, Seed: 7, Workers: n}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d worker(s) (%s): %d states, %d unique, %d findings, %.1f states/s in %s, sessions %v, digest %s",
			s.Workers, s.WorkersWhy, s.States, s.Unique, s.Findings, s.StatesPerSec, s.Elapsed.Round(time.Millisecond), s.Sessions, s.Digest)
		if s.Workers != n || len(s.Sessions) != n || s.Stopped != "" {
			t.Fatalf("asked %d workers: ran %d over %v, stopped %q", n, s.Workers, s.Sessions, s.Stopped)
		}
		for _, id := range s.Sessions {
			if in, err := m.Get(ctx, id); err != nil || in.State != session.StateEnded {
				t.Errorf("worker session %s after the run: %+v %v", id, in, err)
			}
		}
		sums = append(sums, s)
	}
	a, b := sums[0], sums[1]
	if a.Unique != b.Unique || a.Digest != b.Digest || a.Findings != b.Findings || !reflect.DeepEqual(a.Roots, b.Roots) {
		t.Errorf("1 worker against 2: %d/%d unique, digest %s/%s, %d/%d findings", a.Unique, b.Unique, a.Digest, b.Digest, a.Findings, b.Findings)
	}
	fa, err := m.Findings(ctx, a.Session)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := m.Findings(ctx, b.Session)
	if err != nil {
		t.Fatal(err)
	}
	traces := func(fs []session.Finding) []string {
		var out []string
		for _, f := range fs {
			if f.DuplicateOf == "" {
				out = append(out, f.Kind+" "+strings.Join(f.Trace, "; "))
			}
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(traces(fa), traces(fb)) {
		t.Errorf("findings differ: 1 worker %v, 2 workers %v", traces(fa), traces(fb))
	}
	t.Logf("two workers: %.2fx the states/s of one", b.StatesPerSec/a.StatesPerSec)
}
