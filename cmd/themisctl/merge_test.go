package main

import (
	"encoding/hex"
	"strings"
	"testing"
)

// shardView is a shard's explore --json with the given states and findings.
func shardView(i, n int32, keys []string, findings ...*findingJSONView) exploreJSON {
	var hexKeys []string
	for _, k := range keys {
		hexKeys = append(hexKeys, hex.EncodeToString([]byte(k)))
	}
	return exploreJSON{Search: &searchJSON{Lanes: []string{"ext2"}, Depth: 2, Seed: 7}, Shard: &shardJSON{Index: i, Count: n, Depth: 2},
		States: 10, StateKeys: hexKeys, FindingList: findings}
}

func finding(id, sig string, found, trace []string) *findingJSONView {
	return &findingJSONView{ID: id, Kind: "errno-divergence", Signature: sig, FoundTrace: found, Trace: trace}
}

func TestMergeShards(t *testing.T) {
	a := finding("f-a", "errno|0|mkdir|0|17", []string{"mkdir d-00 0755", "mkdir d-00 0755"}, []string{"mkdir d-00 0755", "mkdir d-00 0755"})
	// The same signature, found by the other shard along a longer trace.
	b := finding("f-b", "errno|0|mkdir|0|17", []string{"create f-00 0644", "mkdir d-00 0755", "mkdir d-00 0755"}, []string{"mkdir d-00 0755", "mkdir d-00 0755"})
	parts := []exploreJSON{shardView(1, 2, []string{"r", "x", "y"}, b), shardView(0, 2, []string{"r", "y", "z"}, a)}
	// Both shards judged y by a declared difference, one x too.
	parts[0].DeclaredKeys, parts[0].DeclaredOps = []string{hex.EncodeToString([]byte("x")), hex.EncodeToString([]byte("y"))}, 2
	parts[1].DeclaredKeys, parts[1].DeclaredOps = []string{hex.EncodeToString([]byte("y"))}, 1
	m, err := mergeShards([]string{"s1.json", "s0.json"}, parts)
	if err != nil {
		t.Fatal(err)
	}
	if m.DeclaredStates != 2 || m.DeclaredOps != 3 {
		t.Errorf("declared: %d states, %d ops; want 2 (x and y, once each) and 3", m.DeclaredStates, m.DeclaredOps)
	}
	if m.UniqueStates != 4 || m.States != 20 || m.Findings != 1 || m.FindingList[0].ID != "f-a" || m.Shards != 2 {
		t.Errorf("merged %+v (findings %+v): want 4 unique, 20 states, one finding, f-a's (the shorter found trace)", m, m.FindingList)
	}
	again, err := mergeShards([]string{"s0.json", "s1.json"}, []exploreJSON{parts[1], parts[0]})
	if err != nil || again.Digest != m.Digest {
		t.Errorf("merge depends on the order of its files: %v %s/%s", err, again.Digest, m.Digest)
	}
	for _, tc := range []struct {
		name  string
		parts []exploreJSON
		want  string
	}{
		{"a shard missing", []exploreJSON{shardView(0, 3, nil), shardView(1, 3, nil)}, "shard 2/3 is missing"},
		{"a shard twice", []exploreJSON{shardView(0, 2, nil), shardView(0, 2, nil)}, "both shard 0"},
		{"another search", []exploreJSON{shardView(0, 2, nil), func() exploreJSON { p := shardView(1, 2, nil); p.Search.Seed = 8; return p }()}, "another search"},
		{"another count", []exploreJSON{shardView(0, 2, nil), shardView(1, 3, nil)}, "shard 1/3"},
		{"stopped early", []exploreJSON{shardView(0, 2, nil), func() exploreJSON { p := shardView(1, 2, nil); p.Stopped = "budget"; return p }()}, "stopped early"},
		{"not a shard", []exploreJSON{{}}, "not the --json of an explore --shard run"},
		{"a bad key", []exploreJSON{func() exploreJSON { p := shardView(0, 1, nil); p.StateKeys = []string{"zz"}; return p }()}, "state key"},
		{"a bad declared key", []exploreJSON{func() exploreJSON { p := shardView(0, 1, nil); p.DeclaredKeys = []string{"q"}; return p }()}, "declared state key"},
		{"a bad depth", []exploreJSON{func() exploreJSON { p := shardView(0, 1, nil); p.StateDepths = []int32{1 << 30}; return p }()}, "state_depths"},
		{"no signature", []exploreJSON{shardView(0, 1, nil, finding("f-c", "", nil, nil))}, "no signature"},
	} {
		names := []string{"a.json", "b.json", "c.json"}[:len(tc.parts)]
		if _, err := mergeShards(names, tc.parts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
