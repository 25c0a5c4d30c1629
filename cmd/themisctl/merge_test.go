package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// shardView is a shard's explore --json with the given states and findings.
func shardView(i, n int32, keys []string, findings ...*themisv1.Finding) *themisv1.ExploreResult {
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

func TestMergeShards(t *testing.T) {
	a := finding("f-a", "errno|0|mkdir|0|17", []string{"mkdir d-00 0755", "mkdir d-00 0755"}, []string{"mkdir d-00 0755", "mkdir d-00 0755"})
	// The same signature, found by the other shard along a longer trace.
	b := finding("f-b", "errno|0|mkdir|0|17", []string{"create f-00 0644", "mkdir d-00 0755", "mkdir d-00 0755"}, []string{"mkdir d-00 0755", "mkdir d-00 0755"})
	parts := []*themisv1.ExploreResult{shardView(1, 2, []string{"r", "x", "y"}, b), shardView(0, 2, []string{"r", "y", "z"}, a)}
	// Both shards judged y by a declared difference, one x too.
	parts[0].Summary.DeclaredStateKeys, parts[0].Summary.DeclaredOps = [][]byte{[]byte("x"), []byte("y")}, 2
	parts[1].Summary.DeclaredStateKeys, parts[1].Summary.DeclaredOps = [][]byte{[]byte("y")}, 1
	m, err := mergeShards([]string{"s1.json", "s0.json"}, parts)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetDeclaredStates() != 2 || m.GetDeclaredOps() != 3 {
		t.Errorf("declared: %d states, %d ops; want 2 (x and y, once each) and 3", m.GetDeclaredStates(), m.GetDeclaredOps())
	}
	if m.GetUniqueStates() != 4 || m.GetStates() != 20 || m.GetFindings() != 1 || m.GetFindingList()[0].GetId() != "f-a" || m.GetShards() != 2 {
		t.Errorf("merged %v: want 4 unique, 20 states, one finding, f-a's (the shorter found trace)", m)
	}
	if m.GetRequest().GetShardCount() != 0 || m.GetRequest().GetSeed() != 7 {
		t.Errorf("merged request %v: want the search without the shard", m.GetRequest())
	}
	again, err := mergeShards([]string{"s0.json", "s1.json"}, []*themisv1.ExploreResult{parts[1], parts[0]})
	if err != nil || again.GetDigest() != m.GetDigest() {
		t.Errorf("merge depends on the order of its files: %v %s/%s", err, again.GetDigest(), m.GetDigest())
	}
	with := func(p *themisv1.ExploreResult, f func(*themisv1.ExploreResult)) *themisv1.ExploreResult {
		f(p)
		return p
	}
	for _, tc := range []struct {
		name  string
		parts []*themisv1.ExploreResult
		want  string
	}{
		{"a shard missing", []*themisv1.ExploreResult{shardView(0, 3, nil), shardView(1, 3, nil)}, "shard 2/3 is missing"},
		{"a shard twice", []*themisv1.ExploreResult{shardView(0, 2, nil), shardView(0, 2, nil)}, "both shard 0"},
		{"another search", []*themisv1.ExploreResult{shardView(0, 2, nil), with(shardView(1, 2, nil), func(p *themisv1.ExploreResult) { p.Request.Seed = 8 })}, "another search"},
		{"another count", []*themisv1.ExploreResult{shardView(0, 2, nil), shardView(1, 3, nil)}, "shard 1/3"},
		{"stopped early", []*themisv1.ExploreResult{shardView(0, 2, nil), with(shardView(1, 2, nil), func(p *themisv1.ExploreResult) { p.Summary.Stopped = "budget" })}, "stopped early"},
		{"not a shard", []*themisv1.ExploreResult{{}}, "not the --json of an explore --shard run"},
		{"a bad depth", []*themisv1.ExploreResult{with(shardView(0, 1, nil), func(p *themisv1.ExploreResult) { p.Summary.StateDepths = []int32{1 << 30} })}, "state_depths"},
		{"no signature", []*themisv1.ExploreResult{shardView(0, 1, nil, finding("f-c", "", nil, nil))}, "no signature"},
	} {
		names := []string{"a.json", "b.json", "c.json"}[:len(tc.parts)]
		if _, err := mergeShards(names, tc.parts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestReadShard reads what explore --json writes and refuses what is not
// an ExploreResult, naming the file.
func TestReadShard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, err := protoJSON(shardView(0, 1, []string{"r"}), true)
	if err != nil {
		t.Fatal(err)
	}
	other, err := protoJSON(&themisv1.ListSessionsResponse{}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"good.json", good, ""},
		{"other.json", other, "themis.v1.ListSessionsResponse, want themis.v1.ExploreResult"},
		{"old.json", []byte(`{"session_id":"s-1","digest":"d"}`), "no \"schema\" key"},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := readShard(p)
		switch {
		case tc.want == "" && (err != nil || string(r.GetSummary().GetStateKeys()[0]) != "r"):
			t.Errorf("%s: %v, %v", tc.name, r, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.name)):
			t.Errorf("%s: %v, want an error naming the file and saying %q", tc.name, err, tc.want)
		}
	}
}
