package exploration

import (
	"context"
	"encoding/hex"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestExploreWorkersRealGuest is issue 15's check: explore ext2 to depth 2
// with seed 7 on one worker and on two (two real guests, one search):
// the same unique states, digest and findings; the time of each is
// logged (docs/benchmarks.md). Each worker's session ends with the run.
func TestExploreWorkersRealGuest(t *testing.T) {
	longtest.Need(t, "explore with two workers and two shards against one worker: the same states and digest (about 40 s)")
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

	// Shards 0/2 and 1/2, merged, are the whole search.
	var parts []explore.Part
	states := 0
	for i := range 2 {
		s, err := Run(ctx, m, Options{Lanes: []string{"ext2"}, Depth: 2, Seed: 7, Workers: 1, Shard: explore.Shard{Index: i, Count: 2}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("shard %d/2 at depth %d: %d states, %d unique, %d findings", i, s.Shard.Depth, s.States, s.Unique, s.Findings)
		if len(s.StateKeys) != s.Unique || s.Shard.Count != 2 {
			t.Fatalf("shard %d: %d state keys for %d unique, shard %+v", i, len(s.StateKeys), s.Unique, s.Shard)
		}
		fs, err := m.Findings(ctx, s.Session)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, explore.Part{StateKeys: s.StateKeys, Findings: partFindings(t, fs)})
		states += s.States
	}
	merged := explore.Merge(parts)
	if merged.Unique != a.Unique || hex.EncodeToString(merged.Digest) != a.Digest || len(merged.Findings) != a.Findings {
		t.Errorf("shards merged: %d unique, digest %x, %d findings; whole: %d, %s, %d", merged.Unique, merged.Digest, len(merged.Findings), a.Unique, a.Digest, a.Findings)
	}
	if states < a.States {
		t.Errorf("the shards applied %d ops, the whole search %d", states, a.States)
	}
}

// partFindings are a shard's recorded findings as explore.Merge takes them.
func partFindings(t *testing.T, fs []session.Finding) []explore.PartFinding {
	t.Helper()
	var out []explore.PartFinding
	for _, f := range fs {
		trace, err := opspec.ParseTrace(f.Trace)
		if err != nil {
			t.Fatal(err)
		}
		found, err := opspec.ParseTrace(f.FoundTrace)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, explore.PartFinding{Signature: f.Signature, Finding: explore.Finding{Kind: f.Kind, Trace: trace, Found: found}})
	}
	return out
}
