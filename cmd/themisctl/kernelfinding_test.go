package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/themisfs/themis/internal/kreport"
)

// TestKernelReplayPrinted: a kernel finding's replay prints its ops, the
// op the guest died in, the report's first line and the verdict
// (exploration.KernelReplayed's, judged by the daemon).
func TestKernelReplayPrinted(t *testing.T) {
	same := &kreport.Report{Kind: kreport.Oops, Title: "BUG: unable to handle page fault for address: ffff888004b2d000", RIP: "ext2_mkdir+0x1c/0x90 [ext2]", Trace: []string{"vfs_mkdir+0x9c/0x140"}}
	tests := []struct {
		name    string
		crashed int
		report  *kreport.Report
		want    bool
		says    string
	}{
		{"same fault", 2, same, true, "reproduced: the kernel crashed again at op 2: BUG: unable to handle page fault for address: ffff888004b2d000"},
		{"lives", 0, nil, false, "not reproduced: the 2 ops ran and the guest lives"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &kernelReplay{Finding: "f-1", Session: "s-1", Kind: "kernel", CrashedAt: tt.crashed, CrashedOp: "mkdir d-00 0755", Report: tt.report, Reproduced: tt.want, Verdict: tt.says}
			var b bytes.Buffer
			if err := printKernelReplay(&b, r); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^reproduced +%v$`, tt.want)).MatchString(out) || !strings.Contains(out, tt.says) ||
				tt.report != nil && (!strings.Contains(out, tt.report.Title) || !strings.Contains(out, "the guest died (op 2)")) {
				t.Errorf("printed:\n%s", out)
			}
		})
	}
}
