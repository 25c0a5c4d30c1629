package exploration

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestFamiliesRealGuest runs ext2 against every other family at depth 2
// with no flags (policy auto), a few families a run: each explores past
// the root with no finding, the declared differences counted and the
// unsupported ops left out; exact stops ext2 against btrfs at the root
// again (btrfs counts no subdirectories in a directory's nlink).
func TestFamiliesRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, tt := range []struct {
		lanes    []string
		policy   string
		excluded []string
		findings bool
	}{
		{lanes: []string{"ext2", "btrfs", "xfs", "udf"}},
		{lanes: []string{"ext2", "vfat", "exfat"}, excluded: []string{"link", "symlink"}},
		{lanes: []string{"ext2", "f2fs", "minix", "nilfs2"}}, // boots the generic kernel flavour
		{lanes: []string{"ext2", "btrfs"}, policy: "exact", findings: true},
	} {
		t.Run(strings.Join(tt.lanes, ",")+"/"+tt.policy, func(t *testing.T) {
			s, err := Run(ctx, m, Options{Lanes: tt.lanes, Depth: 2, Seed: 1, Policy: tt.policy}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v (%s): %d states, %d unique, %d findings, declared: %d ops %d states, left out %v\n%s",
				tt.lanes, s.Policy, s.States, s.Unique, s.Findings, s.DeclaredOps, s.DeclaredStates, s.OpsLeftOut, s.Judged)
			fs, err := m.Findings(ctx, s.Session)
			if err != nil {
				t.Fatal(err)
			}
			if tt.findings {
				if len(fs) == 0 || s.Policy != "exact" || s.DeclaredStates != 0 {
					t.Errorf("exact: %d findings, policy %q, %d declared states; want findings and nothing declared", len(fs), s.Policy, s.DeclaredStates)
				}
				return
			}
			for _, f := range fs {
				t.Errorf("finding: %s %v: %s", f.Kind, f.Trace, f.Detail)
			}
			if s.Unique < 3 || s.MaxDepth != 2 || s.Policy != "auto" || s.DeclaredStates == 0 {
				t.Errorf("unique %d, depth %d, policy %q, declared states %d: want past the root to depth 2 under auto, judged by declared differences",
					s.Unique, s.MaxDepth, s.Policy, s.DeclaredStates)
			}
			if !reflect.DeepEqual(s.OpsLeftOut, tt.excluded) {
				t.Errorf("ops left out %v, want %v", s.OpsLeftOut, tt.excluded)
			}
			if !strings.Contains(s.Judged, "directory size ignored") {
				t.Errorf("judged %q: no reasons", s.Judged)
			}
		})
	}
}
