package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/vmm"
)

// deathStatus is the API error of an Apply whose guest died with console
// on its console, as the daemon sends it: the session manager's wrapping
// of the backend's GuestDiedError (shown lines as QEMU's 40, or fewer),
// its text the status's message.
func deathStatus(console string, shown int) error {
	err := fmt.Errorf("session s-1 failed: mkdir: %w", &vmm.GuestDiedError{Err: errors.New("qemu <nil>: agent: stream closed: unexpected EOF"), Console: console, Shown: shown})
	return status.New(codes.Internal, err.Error()).Err()
}

func testConsole(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../internal/kreport/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReportIn reads the kernel report an API error carries: the sysrq
// panic on a dead guest's console (within the 40 lines shown), a BUG
// whose report begins before the lines shown, a KernelReport in the
// status details; none from a death without a report, an error without
// a console, or one that is not a status. A session's reason (the same
// text) reads the same.
func TestReportIn(t *testing.T) {
	withDetail, err := status.New(codes.Internal, "session s-1 failed: mkdir: vmm: guest died").WithDetails(&themisv1.KernelReport{Kind: "bug", Title: "kernel BUG at fs/x.c:1!", Rip: "x_mkdir+0x1/0x2 [x]"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		err       error
		kind      kreport.Kind
		title     string
		traceHead string
	}{
		{"sysrq panic", deathStatus(testConsole(t, "sysrq.txt"), 40), kreport.Panic, "Kernel panic - not syncing: sysrq triggered crash", "dump_stack_lvl+0x44/0x5c"},
		{"BUG before the lines shown", deathStatus(testConsole(t, "bug.txt"), 10), kreport.Bug, "kernel BUG at fs/ext4/namei.c:3477!", "vfs_link+0x1e2/0x330"},
		{"report in the details", withDetail.Err(), kreport.Bug, "kernel BUG at fs/x.c:1!", ""},
		{"no report", deathStatus("booted\nready", 40), "", "", ""},
		{"no console section", status.Error(codes.Internal, "session s-1 failed: mkdir: agent: channel broken"), "", "", ""},
		{"not a status", errors.New("dial: connection refused"), "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reportIn(tt.err)
			if st, ok := status.FromError(tt.err); ok && len(st.Details()) == 0 {
				if fromReason := reportInText(st.Message()); (fromReason == nil) != (r == nil) || r != nil && fromReason.Title != r.Title {
					t.Errorf("from the session's reason %+v, from the error %+v", fromReason, r)
				}
			}
			if tt.kind == "" {
				if r != nil {
					t.Errorf("report %+v, want none", r)
				}
				return
			}
			if r == nil || r.Kind != tt.kind || r.Title != tt.title || tt.traceHead != "" && (len(r.Trace) == 0 || r.Trace[0] != tt.traceHead) {
				t.Errorf("report %+v: want %s %q, trace from %q", r, tt.kind, tt.title, tt.traceHead)
			}
		})
	}
}

// TestKernelReplayJudge: a replay reproduces a kernel finding when its
// guest dies with a report of the finding's signature (another address
// in the first line is the same fault); not when it lives, dies without
// a report, or crashes elsewhere. The printed form says so and names the
// report's first line.
func TestKernelReplayJudge(t *testing.T) {
	want := &themisv1.KernelReport{Kind: "oops", Title: "BUG: unable to handle page fault for address: ffff888003a1c000", Rip: "ext2_mkdir+0x1c/0x90 [ext2]"}
	f := &themisv1.Finding{Id: "f-1", Kind: "kernel", Trace: []string{"create f-00 0644", "mkdir d-00 0755"}, Kernel: want}
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
			r := &kernelReplay{Finding: f.GetId(), Session: "s-1", Kind: "kernel", CrashedAt: tt.crashed, Report: tt.report, Want: reportOf(want).Signature()}
			r.judge(f)
			if r.Reproduced != tt.want || !strings.HasPrefix(r.Verdict, tt.says) {
				t.Errorf("reproduced %v, %q; want %v, %q", r.Reproduced, r.Verdict, tt.want, tt.says)
			}
			var b bytes.Buffer
			if err := printKernelReplay(&b, r); err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^reproduced +%v$`, tt.want)).MatchString(b.String()) || tt.report != nil && !strings.Contains(b.String(), tt.report.Title) {
				t.Errorf("printed:\n%s", b.String())
			}
		})
	}
}
