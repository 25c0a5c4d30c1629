package main

import (
	"fmt"
	"io"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// printKernelReport prints a kernel finding's report (nothing for other
// findings): its first line, where the CPU was, the panic and the call
// trace.
func printKernelReport(w io.Writer, f *themisv1.Finding) {
	k := f.GetKernel()
	if k == nil {
		return
	}
	fmt.Fprintf(w, "  kernel %s: %s\n", k.GetKind(), k.GetTitle())
	if k.GetRip() != "" {
		fmt.Fprintf(w, "  RIP: %s\n", k.GetRip())
	}
	if k.GetPanic() != "" {
		fmt.Fprintf(w, "  panic: %s\n", k.GetPanic())
	}
	if len(k.GetTrace()) > 0 {
		fmt.Fprintln(w, "  call trace:")
		for _, fr := range k.GetTrace() {
			fmt.Fprintf(w, "    %s\n", fr)
		}
	}
}
