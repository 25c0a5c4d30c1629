package exploration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestReplayRefuses: Replay refuses, before it boots anything, a crash
// finding (naming finding_id) and the stock image with another
// (naming stock).
func TestReplayRefuses(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	for _, tc := range []struct {
		f     session.Finding
		on    ReplayOn
		field string
	}{
		{session.Finding{ID: "f-c", Kind: session.KindCrash, LaneSpecs: []string{"ext4"}}, ReplayOn{}, "finding_id"},
		{session.Finding{ID: "f-1", Kind: KindRemount, LaneSpecs: []string{"ext4"}}, ReplayOn{Image: "bug-x", Stock: true}, "stock"},
	} {
		_, err := Replay(context.Background(), m, &tc.f, tc.on)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Replay(%s, %+v): %v, want a FieldError on %s", tc.f.Kind, tc.on, err, tc.field)
		}
	}
	if n, err := m.List(context.Background(), true); err != nil || len(n) != 0 {
		t.Errorf("sessions after refused replays: %v, %v; want none", n, err)
	}
}

// TestBisectRefuses: Bisect refuses, before it boots anything, fewer than
// two images or more than MaxBisectImages (naming images) and an empty one
// (naming it).
func TestBisectRefuses(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	f := &session.Finding{ID: "f-1", Kind: "errno", LaneSpecs: []string{"ext2", "vfat"}}
	many := make([]string, MaxBisectImages+1)
	for i := range many {
		many[i] = "img"
	}
	for _, tc := range []struct {
		images []string
		field  string
	}{{[]string{"a"}, "images"}, {many, "images"}, {[]string{"a", ""}, "images[1]"}} {
		_, err := Bisect(context.Background(), m, f, tc.images)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Bisect(%d images): %v, want a FieldError on %s", len(tc.images), err, tc.field)
		}
	}
}

// TestKernelReplayJudge: a replay reproduces a kernel finding when its
// guest dies with a report of the finding's signature (another address
// in the first line is the same fault); not when it lives, dies without
// a report, or crashes elsewhere.
func TestKernelReplayJudge(t *testing.T) {
	want := &kreport.Report{Kind: kreport.Oops, Title: "BUG: unable to handle page fault for address: ffff888003a1c000", RIP: "ext2_mkdir+0x1c/0x90 [ext2]"}
	same := &kreport.Report{Kind: kreport.Oops, Title: "BUG: unable to handle page fault for address: ffff888004b2d000", RIP: "ext2_mkdir+0x1c/0x90 [ext2]", Trace: []string{"vfs_mkdir+0x9c/0x140"}}
	other := &kreport.Report{Kind: kreport.Oops, Title: "BUG: unable to handle page fault for address: ffff888004b2d000", RIP: "ext2_rmdir+0x10/0x50 [ext2]"}
	tests := []struct {
		name    string
		crashed int
		report  *kreport.Report
		want    bool
		says    string
	}{
		{"same fault", 2, same, true, "reproduced: the kernel crashed again at op 2: BUG: unable to handle page fault for address: ffff888004b2d000"},
		{"lives", 0, nil, false, "not reproduced: the 2 ops ran and the guest lives"},
		{"no report", 2, nil, false, "not reproduced: the guest died at op 2 without a kernel report"},
		{"another fault", 2, other, false, "not reproduced: the kernel crashed at op 2 with another report (oops|ext2_rmdir [ext2], want oops|ext2_mkdir [ext2])"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &KernelReplayed{CrashedAt: tt.crashed, Report: tt.report, Want: want.Signature()}
			if got := k.judge(2); got != tt.want || !strings.HasPrefix(k.Verdict, tt.says) {
				t.Errorf("reproduced %v, %q; want %v, %q", got, k.Verdict, tt.want, tt.says)
			}
		})
	}
}

// TestRemountsBefore: a replay under the remount revert remounts before
// every op but the first, a collide burst's later ones and a same-mount
// op, as the search did; under the machine revert never.
func TestRemountsBefore(t *testing.T) {
	t.Parallel()
	names := explore.CollidingNames()
	trace, err := opspec.ParseTrace([]string{"write f-00 0 9 0x55 creat", "truncate f-00 3", "write f-00 3 2 0x61",
		"same-mount truncate f-00 4096", "create " + names[0] + " 0644", "create " + names[1] + " 0644"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		revert string
		want   []bool
	}{
		{RevertRemount, []bool{false, true, true, false, true, false}},
		{RevertMachine, []bool{false, false, false, false, false, false}},
	} {
		for i := range trace {
			if got := remountsBefore(tt.revert, trace, i); got != tt.want[i] {
				t.Errorf("%s, op %d %v: remounts before %v, want %v", tt.revert, i, trace[i], got, tt.want[i])
			}
		}
	}
	// The walk the search made of every op's state, before the next op.
	walks := []bool{false, true, true, true, true, true}
	for i := range trace {
		if got := explore.WalkedBefore(i); got != walks[i] {
			t.Errorf("op %d %v: walks before %v, want %v", i, trace[i], got, walks[i])
		}
	}
}
