package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// shardView is a shard's explore --json with the given states and findings
// (shards' tests merge them).
func shardView(i, n int32, keys []string, findings ...*themisv1.Finding) *themisv1.ExploreResult {
	var bkeys [][]byte
	for _, k := range keys {
		bkeys = append(bkeys, []byte(k))
	}
	return &themisv1.ExploreResult{Request: &themisv1.ExploreRequest{Lanes: []string{"ext2"}, Depth: 2, Seed: 7, ShardIndex: i, ShardCount: n, Workers: i + 1},
		Summary: &themisv1.ExploreSummary{ShardIndex: i, ShardCount: n, ShardDepth: 2, States: 10, StateKeys: bkeys}, FindingList: findings}
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
