package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/kreport"
)

// TestKernelReplayPrinted: a kernel finding's replay prints its ops, the
// op the guest died in, the report's first line and the verdict
// (exploration.KernelReplayed's, judged by the daemon).
func TestKernelReplayPrinted(t *testing.T) {
	same := &themisv1.KernelReport{Kind: string(kreport.Oops), Title: "BUG: unable to handle page fault for address: ffff888004b2d000", Rip: "ext2_mkdir+0x1c/0x90 [ext2]", Trace: []string{"vfs_mkdir+0x9c/0x140"}}
	tests := []struct {
		name    string
		crashed int
		report  *themisv1.KernelReport
		want    bool
		says    string
	}{
		{"same fault", 2, same, true, "reproduced: the kernel crashed again at op 2: BUG: unable to handle page fault for address: ffff888004b2d000"},
		{"lives", 0, nil, false, "not reproduced: the 2 ops ran and the guest lives"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &themisv1.ReplayResponse{FindingId: "f-1", SessionId: "s-1", Kind: "kernel", CrashedAt: int32(tt.crashed), CrashedOp: "mkdir d-00 0755", Kernel: tt.report, Reproduced: tt.want, Verdict: tt.says}
			var b bytes.Buffer
			if err := printKernelReplay(&b, r); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^reproduced +%v$`, tt.want)).MatchString(out) || !strings.Contains(out, tt.says) ||
				tt.report != nil && (!strings.Contains(out, tt.report.GetTitle()) || !strings.Contains(out, "the guest died (op 2)")) {
				t.Errorf("printed:\n%s", out)
			}
		})
	}
}
