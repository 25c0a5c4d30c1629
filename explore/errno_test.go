package explore

import (
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestErrnoFinding: lanes that disagree on an op's errno are a finding
// unless the only disagreement is an errno a lane's family declares for
// that op kind.
func TestErrnoFinding(t *testing.T) {
	chmod := &agentv1.Request{Op: &agentv1.Request_Chmod{Chmod: &agentv1.Chmod{Path: "f", Mode: 0o600}}}
	declared := map[string]map[string]int32{"exfat": {"chmod": 1}}
	r := func(pairs ...any) []LaneResult {
		var out []LaneResult
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, LaneResult{Lane: pairs[i].(string), Errno: int32(pairs[i+1].(int))})
		}
		return out
	}
	tests := []struct {
		name     string
		declared map[string]map[string]int32
		results  []LaneResult
		want     bool
	}{
		{"agree", declared, r("ext2", 0, "exfat", 0), false},
		{"declared errno only", declared, r("ext2", 0, "exfat", 1), false},
		{"another errno", declared, r("ext2", 0, "exfat", 2), true},
		{"declared, the others disagree", declared, r("ext2", 0, "btrfs", 13, "exfat", 1), true},
		{"declared, the others agree", declared, r("ext2", 0, "btrfs", 0, "exfat", 1), false},
		{"nothing declared", nil, r("ext2", 0, "exfat", 1), true},
	}
	for _, tt := range tests {
		if got := ErrnoFinding(tt.declared, chmod, tt.results); got != tt.want {
			t.Errorf("%s: ErrnoFinding = %v, want %v", tt.name, got, tt.want)
		}
	}
}
