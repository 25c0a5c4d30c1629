package shards_test

import (
	"errors"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/shards"
)

// shard is a shard's result with the given states and findings.
func shard(i, n int32, keys []string, findings ...*themisv1.Finding) *themisv1.ExploreResult {
	var bkeys [][]byte
	for _, k := range keys {
		bkeys = append(bkeys, []byte(k))
	}
	return &themisv1.ExploreResult{Request: &themisv1.ExploreRequest{Lanes: []string{"ext2"}, Depth: 2, Seed: 7, ShardIndex: i, ShardCount: n, Workers: i + 1},
		Summary: &themisv1.ExploreSummary{ShardIndex: i, ShardCount: n, ShardDepth: 2, States: 10, StateKeys: bkeys}, FindingList: findings}
}

func finding(id, sig string, found, trace []string) *themisv1.Finding {
	return &themisv1.Finding{Id: id, Kind: "errno-divergence", Signature: sig, FoundTrace: found, Trace: trace}
}

// with is p changed by f.
func with(p *themisv1.ExploreResult, f func(*themisv1.ExploreResult)) *themisv1.ExploreResult {
	f(p)
	return p
}

func TestExplore(t *testing.T) {
	t.Parallel()
	a := finding("f-a", "errno|0|mkdir|0|17", []string{"mkdir d-00 0755", "mkdir d-00 0755"}, []string{"mkdir d-00 0755", "mkdir d-00 0755"})
	// The same signature, found by the other shard along a longer trace.
	b := finding("f-b", "errno|0|mkdir|0|17", []string{"create f-00 0644", "mkdir d-00 0755", "mkdir d-00 0755"}, []string{"mkdir d-00 0755", "mkdir d-00 0755"})
	parts := []*themisv1.ExploreResult{shard(1, 2, []string{"r", "x", "y"}, b), shard(0, 2, []string{"r", "y", "z"}, a)}
	// Both shards judged y by a declared difference, one x too.
	parts[0].Summary.DeclaredStateKeys, parts[0].Summary.DeclaredOps = [][]byte{[]byte("x"), []byte("y")}, 2
	parts[1].Summary.DeclaredStateKeys, parts[1].Summary.DeclaredOps = [][]byte{[]byte("y")}, 1
	m, err := shards.Explore([]string{"s1.json", "s0.json"}, parts)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetDeclaredStates() != 2 || m.GetDeclaredOps() != 3 {
		t.Errorf("declared: %d states, %d ops; want 2 (x and y, once each) and 3", m.GetDeclaredStates(), m.GetDeclaredOps())
	}
	if m.GetUniqueStates() != 4 || m.GetStates() != 20 || m.GetFindings() != 1 || m.GetFindingList()[0].GetId() != "f-a" || m.GetShards() != 2 {
		t.Errorf("merged %v: want 4 unique, 20 states, one finding, f-a's (the shorter found trace)", m)
	}
	if m.GetRequest().GetShardCount() != 0 || m.GetRequest().GetSeed() != 7 || m.GetRequest().GetWorkers() != 0 {
		t.Errorf("merged request %v: want the search without the shard or workers", m.GetRequest())
	}
	again, err := shards.Explore([]string{"s0.json", "s1.json"}, []*themisv1.ExploreResult{parts[1], parts[0]})
	if err != nil || again.GetDigest() != m.GetDigest() {
		t.Errorf("merge depends on the order of its parts: %v %s/%s", err, again.GetDigest(), m.GetDigest())
	}
}

// TestExploreRefuses: each bad set of parts is refused, naming the part
// (or shards) and what is wrong, as errkind.ErrInvalid.
func TestExploreRefuses(t *testing.T) {
	t.Parallel()
	many := make([]*themisv1.ExploreResult, shards.MaxShards+1)
	for _, tc := range []struct {
		name  string
		parts []*themisv1.ExploreResult
		want  string
	}{
		{"none", nil, "shards: none given"},
		{"too many", many, "at most 4096"},
		{"a shard missing", []*themisv1.ExploreResult{shard(0, 3, nil), shard(1, 3, nil)}, "shard 2/3 is missing"},
		{"a shard twice", []*themisv1.ExploreResult{shard(0, 2, nil), shard(0, 2, nil)}, "both shard 0"},
		{"another search", []*themisv1.ExploreResult{shard(0, 2, nil), with(shard(1, 2, nil), func(p *themisv1.ExploreResult) { p.Request.Seed = 8 })}, "b: of another search"},
		{"another count", []*themisv1.ExploreResult{shard(0, 2, nil), shard(1, 3, nil)}, "shard 1/3"},
		{"an index past the count", []*themisv1.ExploreResult{shard(0, 2, nil), shard(2, 2, nil)}, "b: shard 2/2"},
		{"a huge count", []*themisv1.ExploreResult{shard(0, 1<<30, nil)}, "want an index below a count of at most"},
		{"stopped early", []*themisv1.ExploreResult{shard(0, 2, nil), with(shard(1, 2, nil), func(p *themisv1.ExploreResult) { p.Summary.Stopped = "budget" })}, "stopped early"},
		{"not a shard", []*themisv1.ExploreResult{{}}, "not the result of an explore --shard run"},
		{"a bad depth", []*themisv1.ExploreResult{with(shard(0, 1, nil), func(p *themisv1.ExploreResult) { p.Summary.StateDepths = []int32{1 << 30} })}, "state_depths"},
		{"no signature", []*themisv1.ExploreResult{shard(0, 1, nil, finding("f-c", "", nil, nil))}, "no signature"},
		{"a bad trace", []*themisv1.ExploreResult{shard(0, 1, nil, finding("f-d", "s", nil, []string{"frobnicate x"}))}, "trace"},
	} {
		names := make([]string, len(tc.parts))
		for i := range names {
			names[i] = string(rune('a' + i%26))
		}
		_, err := shards.Explore(names, tc.parts)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errkind.ErrInvalid) {
			t.Errorf("%s: %v, want an invalid-argument error saying %q", tc.name, err, tc.want)
		}
	}
}
