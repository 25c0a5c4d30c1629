package exploration

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
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
		revert   string
		excluded []string
		findings bool
	}{
		{lanes: []string{"ext2", "btrfs", "xfs", "udf"}},
		{lanes: []string{"ext2", "vfat", "exfat"}, excluded: []string{"link", "symlink"}},
		// The generic kernel flavour. f2fs's and nilfs2's umount+mount
		// cost more than a machine restore: the same 56 states took 35 s
		// under the remount revert and 15 s under the machine revert.
		{lanes: []string{"ext2", "f2fs", "minix", "nilfs2"}, revert: RevertMachine},
		{lanes: []string{"ext2", "btrfs"}, policy: "exact", findings: true},
	} {
		t.Run(strings.Join(tt.lanes, ",")+"/"+tt.policy, func(t *testing.T) {
			s, err := Run(ctx, m, Options{Workers: 1, Lanes: tt.lanes, Depth: 2, Seed: 1, Policy: tt.policy, Revert: tt.revert}, nil, nil)
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

// TestMaxFileRealGuest holds the family table's largest files
// (family.Family.MaxFile) against the guest's kernel: on every lane whose
// family declares one, a truncate past it gives EFBIG and one to it does
// not (it succeeds, or FAT, which has no holes, runs out of space).
func TestMaxFileRealGuest(t *testing.T) {
	longtest.Need(t, "the declared largest files against the guest kernel (one boot, about 40 s)")
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var lanes []string
	for _, f := range family.Table {
		if f.MaxFile > 0 {
			lanes = append(lanes, f.FS...)
		}
	}
	info, err := m.Create(ctx, session.CreateOptions{Lanes: append(slices.Clone(lanes), "xfs", "btrfs")})
	if err != nil {
		t.Fatal(err)
	}
	errnoOn := func(lane, op string) int32 {
		t.Helper()
		req, err := opspec.ParseRequest(op)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Apply(ctx, info.ID, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Lane == lane {
				return r.Errno
			}
		}
		t.Fatalf("%s: no result for lane %s", op, lane)
		return 0
	}
	errnoOn(lanes[0], "create f-00 0644")
	for _, lane := range lanes {
		fam, err := family.Of(lane)
		if err != nil {
			t.Fatal(err)
		}
		past := errnoOn(lane, fmt.Sprintf("truncate f-00 %d", fam.MaxFile+1))
		at := errnoOn(lane, fmt.Sprintf("truncate f-00 %d", fam.MaxFile))
		errnoOn(lane, "truncate f-00 0")
		t.Logf("%s: truncate to %d: errno %d, one past: errno %d", lane, fam.MaxFile, at, past)
		if past != int32(syscall.EFBIG) || at == int32(syscall.EFBIG) {
			t.Errorf("%s: declared largest file %d: truncate to it gave errno %d, one past it %d; want not EFBIG, then EFBIG", lane, fam.MaxFile, at, past)
		}
	}
	farRead(ctx, t, m, info.ID, errnoOn)
}

// farRead: a file whose data ends 4082 bytes short of 2^63 (15 bytes
// written at 2^63-4097, O_SYNC, on xfs and btrfs, whose largest file is
// 2^63-1)
// reads whole in the walk. The hunt of 2026-12-04 found the walk refusing
// it on xfs (EINVAL: a chunk read reaching 2^63), an unreadable finding of
// Themis's own, and seeking forever on btrfs (its SEEK_HOLE answers -2^63
// for data ending at 2^63: the guest stopped answering). That answer is
// btrfs's bug (docs/hunt.md), and the walk says so (seek_error, the
// seek-answer check): on btrfs the entry carries it, on xfs it does not.
// Should a later guest kernel fix btrfs, this test says so.
func farRead(ctx context.Context, t *testing.T, m *session.Manager, id string, errnoOn func(lane, op string) int32) {
	t.Helper()
	const off = 1<<63 - 4097
	for _, lane := range []string{"xfs", "btrfs"} {
		if n := errnoOn(lane, fmt.Sprintf("write f-01 %d 15 0xff sync creat", off)); n != 0 {
			t.Fatalf("%s: the far write: errno %d", lane, n)
		}
		fps, err := m.Fingerprint(ctx, id, agentv1.TimeMode_TIME_MODE_NONE, true, []string{lane})
		if err != nil {
			t.Fatalf("%s: %v", lane, err)
		}
		e := oracle.Find(fps[0].Leaves, "f-01")
		if e == nil || e.GetReadErrno() != 0 || e.GetSize() != off+15 || len(e.GetContentHash()) == 0 {
			t.Errorf("%s: f-01 after 15 bytes at %d: %v; want it read whole, %d bytes", lane, off, e, off+15)
		}
		wrong := strings.Contains(e.GetSeekError(), "SEEK_HOLE) = -9223372036854775808")
		t.Logf("%s: seek error %q", lane, e.GetSeekError())
		if want := lane == "btrfs"; wrong != want {
			t.Errorf("%s: seek error %q; want btrfs's SEEK_HOLE of -2^63 there (6.1.192), none on xfs", lane, e.GetSeekError())
		}
	}
}
