package crashcheck

import (
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/session"
)

// TestPick: a state that lost what was made durable wins, else the
// not-clean one latest in the trace (most flushes), the first of those.
func TestPick(t *testing.T) {
	t.Parallel()
	r := func(flushes int, verdict, durability string) Result {
		return Result{State: crash.State{Flushes: flushes}, Verdict: verdict, Durability: durability}
	}
	for _, tt := range []struct {
		name string
		bad  []Result
		want int
	}{
		{"one", []Result{r(0, Dirty, "")}, 0},
		{"most flushes", []Result{r(0, Dirty, ""), r(2, Broken, ""), r(2, Dirty, ""), r(1, Dirty, "")}, 1},
		{"lost wins", []Result{r(3, Dirty, ""), r(1, Clean, "LOST g"), r(4, Dirty, "")}, 1},
		{"first lost", []Result{r(1, Clean, "LOST a"), r(2, Clean, "LOST b")}, 0},
	} {
		got := Pick(tt.bad)
		if got.State.Flushes != tt.bad[tt.want].State.Flushes || got.Verdict != tt.bad[tt.want].Verdict || got.Durability != tt.bad[tt.want].Durability {
			t.Errorf("%s: Pick = %+v, want %+v", tt.name, got, tt.bad[tt.want])
		}
	}
}

// TestNewFinding: a crash finding carries the trace, the lane's spec, the
// state and its counts, a signature by class, filesystem and persistence
// op, and a detail naming the checker's first problem line.
func TestNewFinding(t *testing.T) {
	t.Parallel()
	res := Result{Lane: "ext2", State: crash.State{Keep: []int{0, 2}, Flushes: 0, Kind: crash.KindSubset, Epoch: []int{0, 1, 2}}, Verdict: Dirty,
		Output: "e2fsck 1.47.0 (5-Feb-2023)\nPass 1: Checking inodes\nEntry 'd' in / (2) has deleted/unused inode 13.  Clear? no\n"}
	f, err := NewFinding(Of{Spec: "ext2", FS: "ext2", Setup: []string{"create seed 0644"}, SetupSync: true, Trace: []string{"mkdir d 0755", "fsync d"},
		Last: &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: "d"}}}, Result: res,
		Lane: LaneSummary{Writes: 3, Flushes: 1, States: 6, Dirty: 4, Bad: 4}})
	if err != nil {
		t.Fatal(err)
	}
	c := f.Crash
	switch {
	case f.Kind != session.KindCrash || !strings.HasPrefix(f.ID, "f-") || len(f.LaneSpecs) != 1 || f.OriginalLen != 2:
		t.Errorf("finding %+v", f)
	case c.Lane != "ext2" || !c.SetupSync || len(c.Setup) != 1 || c.Kind != crash.KindSubset || len(c.Keep) != 2 || c.Writes != 3 || c.NotClean != 4:
		t.Errorf("crash point %+v", c)
	case f.Signature != "crash not-clean ext2 after fsync":
		t.Errorf("signature %q", f.Signature)
	case !strings.Contains(f.Detail, "has deleted/unused inode 13") || !strings.Contains(f.Detail, "4 of 6"):
		t.Errorf("detail %q", f.Detail)
	}
}

// TestClassAtomicity: a clean state at no op boundary is not-atomic (a
// finding, its detail saying so); at a boundary, or not compared, it is
// good; a lost one stays lost.
func TestClassAtomicity(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r    Result
		want string
	}{
		{Result{Verdict: Clean, Atomicity: NotAtBoundary}, "not-atomic"},
		{Result{Verdict: Clean, Atomicity: "op 2"}, ""},
		{Result{Verdict: Clean}, ""},
		{Result{Verdict: Clean, Durability: "LOST g: missing", Atomicity: NotAtBoundary}, "lost"},
		{Result{Verdict: Unmountable}, "not-clean"},
		{Result{Verdict: NoState}, ""},
	} {
		if got := Class(tt.r); got != tt.want {
			t.Errorf("Class(%+v) = %q, want %q", tt.r, got, tt.want)
		}
	}
	f, err := NewFinding(Of{Spec: "btrfs", FS: "btrfs", Trace: []string{"fsync g"}, Last: &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: "g"}}},
		Result: Result{Lane: "btrfs", Verdict: Clean, Durability: Kept, Atomicity: NotAtBoundary}, Lane: LaneSummary{States: 5, Bad: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Signature != "crash not-atomic btrfs after fsync" || !strings.Contains(f.Detail, "equal to no op boundary") || !strings.Contains(f.Detail, "1 of 5") {
		t.Errorf("signature %q, detail %q", f.Signature, f.Detail)
	}
}

// TestNewFindingDeath: a state whose check lost the guest is a finding of
// its verdict's class, with the kernel's report (its signature in the
// finding's) or, without one, what the call saw; a good state is none.
func TestNewFindingDeath(t *testing.T) {
	t.Parallel()
	report := &kreport.Report{Kind: kreport.Bug, Title: "kernel BUG at fs/ext2/super.c:42!", RIP: "ext2_fill_super+0x1c/0x90 [ext2]"}
	fsync := &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: "f"}}}
	cases := []struct {
		r         Result
		class     string
		signature string
		detail    string
	}{
		{Result{Lane: "ext2", Verdict: KernelCrash, Output: report.Title, Kernel: report}, KernelCrash,
			"crash kernel-crash ext2 after fsync: bug|ext2_fill_super [ext2]", "kernel-crash: kernel BUG at fs/ext2/super.c:42! (RIP ext2_fill_super+0x1c/0x90 [ext2])"},
		{Result{Lane: "ext2", Verdict: Hung, Output: "no answer within 2m0s and no kernel report on the console"}, Hung,
			"crash guest-hung ext2 after fsync", "guest-hung: no answer within 2m0s"},
		{Result{Lane: "ext2", Verdict: Clean}, "", "", ""},
	}
	for _, tc := range cases {
		if got := Class(tc.r); got != tc.class {
			t.Errorf("Class(%s) = %q, want %q", tc.r.Verdict, got, tc.class)
		}
		if tc.class == "" {
			continue
		}
		f, err := NewFinding(Of{Spec: "ext2", FS: "ext2", Trace: []string{"fsync f"}, Last: fsync, Result: tc.r, Lane: LaneSummary{States: 2, Bad: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if f.Signature != tc.signature || !strings.Contains(f.Detail, tc.detail) || f.Kernel != tc.r.Kernel || f.Crash.Verdict != tc.r.Verdict {
			t.Errorf("%s: finding signature %q, detail %q, kernel %+v: want %q, %q", tc.r.Verdict, f.Signature, f.Detail, f.Kernel, tc.signature, tc.detail)
		}
	}
}

// TestSignatureOf: a lost state's signature says what the fsync had made
// durable (an empty file lost is not the bug of a file's data lost); a
// not-clean state's does not.
func TestSignatureOf(t *testing.T) {
	t.Parallel()
	fsync := &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: "f"}}}
	for _, tt := range []struct {
		name string
		r    Result
		want string
	}{
		{"empty file lost", Result{Verdict: Dirty, Durability: "LOST f: missing", Fsynced: (&durable{}).what()}, "crash lost ext2 after fsync of an empty file"},
		{"data lost", Result{Verdict: Clean, Durability: "LOST f: missing", Fsynced: (&durable{content: []byte{1}}).what()}, "crash lost ext2 after fsync of a file"},
		{"entries lost", Result{Verdict: Clean, Durability: "LOST directory d: x missing", Fsynced: (&durable{entries: []string{"x"}}).what()}, "crash lost ext2 after fsync of a directory"},
		{"not clean", Result{Verdict: Dirty, Durability: Kept}, "crash not-clean ext2 after fsync"},
	} {
		if got := signatureOf(Of{FS: "ext2", Last: fsync, Result: tt.r}); got != tt.want {
			t.Errorf("%s: signature %q, want %q", tt.name, got, tt.want)
		}
	}
}
