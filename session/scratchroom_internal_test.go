package session

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/internal/scratch/scratchtest"
)

// TestScratchRoom: the startup warning about the scratch dir's room for
// guest RAM, on small tmpfs mounts of known size.
func TestScratchRoom(t *testing.T) {
	small, big := scratchtest.Tmpfs(t, 8), scratchtest.Tmpfs(t, 256)
	tests := []struct {
		name   string
		dir    string
		maxMiB int
		want   []string // in the warning; nil: none
	}{
		{"not one default guest", small, 2048, []string{small, "8.0 MiB free", "not one guest of the default 128 MiB"}},
		{"less than max memory", big, 2048, []string{big, "256.0 MiB free", "limits.max_memory_mib (2048 MiB)"}},
		{"room for max memory", big, 256, nil},
		{"no such dir", filepath.Join(small, "gone"), 256, []string{"statfs", "gone"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scratchRoom(tc.dir, tc.maxMiB)
			if tc.want == nil && got != "" {
				t.Fatalf("scratchRoom(%s, %d) = %q; want no warning", tc.dir, tc.maxMiB, got)
			}
			for _, s := range tc.want {
				if !strings.Contains(got, s) {
					t.Errorf("scratchRoom(%s, %d) = %q; want it to say %q", tc.dir, tc.maxMiB, got, s)
				}
			}
		})
	}
}
