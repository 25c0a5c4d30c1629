package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/repro"
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

// replayKernelCmd is `themisctl replay` of a kernel finding.
func replayKernelCmd(ctx context.Context, g *globals, c *conn, f *themisv1.Finding, image string) error {
	rep, err := replayKernel(ctx, c, f, image)
	if err != nil {
		return err
	}
	if g.json {
		return writeProtoJSON(rep)
	}
	return printKernelReplay(os.Stdout, rep)
}

// replayKernel replays kernel finding f on the daemon (the Replay RPC:
// its ops until the guest dies, the report judged against the finding's)
// on image ("": the finding's own).
func replayKernel(ctx context.Context, c *conn, f *themisv1.Finding, image string) (*themisv1.ReplayResponse, error) {
	progress(fmt.Sprintf("replaying %s (%s: this crashes the session's guest) on %s", f.GetId(), f.GetKind(), strings.Join(f.GetLaneSpecs(), ",")))
	return c.Replay(ctx, &themisv1.ReplayRequest{FindingId: f.GetId(), Image: image})
}

func printKernelReplay(out io.Writer, r *themisv1.ReplayResponse) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "session\t%s\n", r.GetSessionId())
	if booted := imageLine(r.GetBooted()); booted != "" {
		fmt.Fprintf(w, "image\t%s\n", booted)
	}
	for _, st := range r.GetSteps() {
		fmt.Fprintf(w, "%s\t%s\n", st.GetOp(), strings.Join(st.GetErrnos(), " "))
	}
	if r.GetCrashedAt() > 0 {
		fmt.Fprintf(w, "%s\tthe guest died (op %d)\n", r.GetCrashedOp(), r.GetCrashedAt())
	}
	if k := r.GetKernel(); k != nil {
		fmt.Fprintf(w, "kernel %s\t%s\n", k.GetKind(), k.GetTitle())
		if k.GetRip() != "" {
			fmt.Fprintf(w, "RIP\t%s\n", k.GetRip())
		}
		if tr := k.GetTrace(); len(tr) > 0 {
			fmt.Fprintf(w, "call trace\t%s\n", strings.Join(tr[:min(4, len(tr))], " < "))
		}
	}
	fmt.Fprintf(w, "reproduced\t%v\n", r.GetReproduced())
	fmt.Fprintf(w, "\t%s\n", r.GetVerdict())
	return w.Flush()
}

// reportOf is the API's kernel report as kreport's (nil: an empty one).
func reportOf(k *themisv1.KernelReport) *kreport.Report {
	if k == nil {
		return &kreport.Report{}
	}
	return &kreport.Report{Kind: kreport.Kind(k.GetKind()), Title: k.GetTitle(), RIP: k.GetRip(), Trace: k.GetTrace(), Panic: k.GetPanic(), Text: k.GetText()}
}

// stockReplay replays f on the stock image of its lanes (findings export
// of a finding found on a patched image): a kernel finding as `replay`
// does one, any other by its lanes' errnos and states (the Replay RPC with
// stock).
func stockReplay(ctx context.Context, c *conn, f *themisv1.Finding) (*repro.Stock, error) {
	progress(fmt.Sprintf("replaying %s (%s) on its lanes' stock image", f.GetId(), f.GetKind()))
	r, err := c.Replay(ctx, &themisv1.ReplayRequest{FindingId: f.GetId(), Stock: true})
	if err != nil {
		return nil, err
	}
	return &repro.Stock{Kernel: r.GetBooted().GetKernelVersion(), Reproduced: r.GetReproduced()}, nil
}

// reproReport is a kernel finding's report for its reproducer (nil: not a
// kernel finding).
func reproReport(k *themisv1.KernelReport) *repro.KernelReport {
	if k == nil {
		return nil
	}
	return &repro.KernelReport{Kind: k.GetKind(), Title: k.GetTitle(), RIP: k.GetRip(), Panic: k.GetPanic(), Trace: k.GetTrace(), Text: k.GetText()}
}
