package server

import (
	"slices"
	"testing"

	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/session"
)

// TestFindingProtoKernel: a kernel finding's report reaches the API's
// Finding.kernel field by field; other findings have none.
func TestFindingProtoKernel(t *testing.T) {
	r := &kreport.Report{Kind: kreport.Bug, Title: "kernel BUG at fs/ext4/namei.c:3477!", RIP: "ext4_link+0x1c/0x90 [ext4]",
		Trace: []string{"vfs_link+0x1e2/0x330"}, Panic: "Fatal exception", Text: "kernel BUG at fs/ext4/namei.c:3477!"}
	k := findingProto(&session.Finding{ID: "f-1", Kind: session.KindKernel, Kernel: r}).GetKernel()
	if k.GetKind() != "bug" || k.GetTitle() != r.Title || k.GetRip() != r.RIP || !slices.Equal(k.GetTrace(), r.Trace) || k.GetPanic() != r.Panic || k.GetText() != r.Text {
		t.Errorf("kernel report %v, want %+v", k, r)
	}
	if p := findingProto(&session.Finding{ID: "f-2", Kind: "errno-divergence"}); p.GetKernel() != nil {
		t.Errorf("errno finding with a kernel report %v", p.GetKernel())
	}
}
