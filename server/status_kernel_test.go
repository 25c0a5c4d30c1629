package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/vmm"
)

// TestStatusKernelReport: a guest that died with a kernel report on its
// console answers with the report in the status's details; a death
// without one, and another error, carry none.
func TestStatusKernelReport(t *testing.T) {
	bug, err := os.ReadFile(filepath.Join("..", "internal", "kreport", "testdata", "bug.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		err   error
		title string
	}{
		{"a BUG", fmt.Errorf("apply: %w", &vmm.GuestDiedError{Err: fmt.Errorf("qemu exited"), Console: string(bug)}), "kernel BUG at fs/ext4/namei.c:3477!"},
		{"no report", &vmm.GuestDiedError{Err: fmt.Errorf("qemu exited"), Console: "Booting the kernel.\n"}, ""},
		{"not a death", fmt.Errorf("something else"), ""},
	}
	for _, tt := range tests {
		st := status.Convert(toStatus(tt.err))
		var got *themisv1.KernelReport
		for _, d := range st.Details() {
			if k, ok := d.(*themisv1.KernelReport); ok {
				got = k
			}
		}
		if got.GetTitle() != tt.title {
			t.Errorf("%s: details' report %v, want title %q", tt.name, got, tt.title)
		}
	}
}
