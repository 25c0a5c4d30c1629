package explore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// partOf is a run's result as Merge takes it.
func partOf(res *Result) Part {
	p := Part{StateKeys: res.StateKeys, StateDepths: res.StateDepths}
	for _, f := range slices.Concat(res.Findings, res.Duplicates) {
		p.Findings = append(p.Findings, PartFinding{Signature: f.Signature(), Finding: f})
	}
	return p
}

func mergedOutcome(m Merged) outcome {
	o := outcome{unique: m.Unique, byDepth: m.UniqueByDepth, digest: fmt.Sprintf("%x", m.Digest)}
	for _, f := range m.Findings {
		o.findings = append(o.findings, fmt.Sprintf("%s %s %s", f.Finding.Kind, f.Signature, strings.Join(opKeysOf(f.Finding.Trace), ";")))
	}
	slices.Sort(o.findings)
	return o
}

// TestShardsMerge: a search split into n shards at each level, run
// separately (on two workers each, to mix both splits) and merged, gives
// the whole search's unique states, digest and findings; the shards
// together apply at least every op of the whole, and the largest shard
// less than the whole.
func TestShardsMerge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		bugs []string
		cfg  Config
	}{
		{"truncate-cap", []string{"", "truncate-cap"}, Config{Seed: 3, Depth: 3, Branching: 12,
			Ops: []string{OpCreateFile, OpTruncate, OpChmod}, Pool: PathPool{Files: 2, Depth: 1}}},
		{"rmdir-nonempty and link-nlink", []string{"", "rmdir-nonempty", "link-nlink"}, Config{Seed: 9, Depth: 3, Branching: 12,
			Ops: []string{OpMkdir, OpRmdir, OpCreateFile, OpLink}, Pool: PathPool{Files: 2, Dirs: 1, Depth: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			whole, _ := runWorkers(t, 1, 0, tc.bugs, tc.cfg, 0, false)
			want := summarize(whole)
			want.stopped = ""
			if len(whole.Findings) == 0 {
				t.Fatal("no findings: nothing to merge")
			}
			for _, depth := range []int{1, 2, 3} {
				for _, n := range []int{2, 4, 16} {
					var parts []Part
					states, largest := 0, 0
					for i := range n {
						cfg := tc.cfg
						cfg.Shard = Shard{Index: i, Count: n, Depth: depth}
						res, _ := runWorkers(t, 2, uint64(i), tc.bugs, cfg, 0, false)
						if res.Stopped != StopDone {
							t.Fatalf("shard %d/%d stopped %q", i, n, res.Stopped)
						}
						states, largest = states+res.States, max(largest, res.States)
						parts = append(parts, partOf(res))
					}
					if got := mergedOutcome(Merge(parts)); !equalOutcome(got, want) {
						t.Errorf("%d shards at depth %d merged: %+v\nwant (whole) %+v", n, depth, got, want)
					}
					if largest >= whole.States {
						t.Errorf("%d shards at depth %d: the largest applied %d ops, the whole search %d: nothing was divided", n, depth, largest, whole.States)
					}
					if states < whole.States {
						t.Errorf("%d shards at depth %d applied %d ops in all, fewer than the whole search's %d", n, depth, states, whole.States)
					}
				}
			}
		})
	}
}

func TestShardConfig(t *testing.T) {
	t.Parallel()
	for _, sh := range []Shard{{Index: 2, Count: 2}, {Index: -1, Count: 2}, {Count: -1}, {Index: 0, Count: 2, Depth: 5}, {Count: MaxShards + 1}} {
		if _, err := NewChecker(newToy(""), Config{Depth: 3, Shard: sh}); err == nil {
			t.Errorf("shard %+v accepted", sh)
		}
	}
	c, err := NewChecker(newToy(""), Config{Depth: 3, Shard: Shard{Index: 1, Count: 2}})
	if err != nil || c.Config().Shard.Depth != DefaultShardDepth {
		t.Errorf("default shard depth: %+v %v", c.Config().Shard, err)
	}
	res, err := c.Run(context.Background())
	if err != nil || len(res.StateKeys) != res.Unique {
		t.Errorf("a shard's state keys: %d for %d unique, %v", len(res.StateKeys), res.Unique, err)
	}
}

// TestShardBalance is the scale model of docs/benchmarks.md: a depth-3
// search of the Metis ops over the toy filesystem (the pure checker, no
// guest), split into n = 4, 16, 64 shards at each shard depth; per shard
// the ops applied (the work), reported as the largest shard against the
// mean and against the whole search. A cluster's wall time is its
// largest shard's. It asserts only what must hold: the shards together
// cover the whole search.
func TestShardBalance(t *testing.T) {
	if testing.Short() {
		t.Skip("scale model: a few seconds")
	}
	t.Parallel()
	cfg := Config{Seed: 1, Depth: 3, Pool: PathPool{Files: 2, Dirs: 1, Depth: 1}}
	whole, _ := runWorkers(t, 1, 0, []string{""}, cfg, 0, false)
	t.Logf("whole search: %d ops applied, %d unique states", whole.States, whole.Unique)
	t.Logf("%-6s %-6s %10s %10s %12s %12s", "depth", "shards", "mean ops", "max ops", "max/mean", "max/whole")
	for _, depth := range []int{1, 2, 3} {
		for _, n := range []int{4, 16, 64} {
			var counts []int
			var parts []Part
			for i := range n {
				c := cfg
				c.Shard = Shard{Index: i, Count: n, Depth: depth}
				res, _ := runWorkers(t, 1, 0, []string{""}, c, 0, false)
				counts = append(counts, res.States)
				parts = append(parts, partOf(res))
			}
			if m := Merge(parts); m.Unique != whole.Unique {
				t.Errorf("depth %d, %d shards: merged %d unique, whole %d", depth, n, m.Unique, whole.Unique)
			}
			sum, top := 0, slices.Max(counts)
			for _, c := range counts {
				sum += c
			}
			mean := float64(sum) / float64(n)
			t.Logf("%-6d %-6d %10.1f %10d %12.2f %12.2f", depth, n, mean, top, float64(top)/mean, float64(top)/float64(whole.States))
		}
	}
}
