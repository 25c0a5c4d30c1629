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

// kernelReplay is `themisctl replay` of a kernel finding: its trace run
// on a fresh session until the guest dies or the trace ends.
type kernelReplay struct {
	Finding string       `json:"finding"`
	Session string       `json:"session"`
	Kind    string       `json:"kind"`
	Image   string       `json:"image,omitempty"`
	Booted  string       `json:"booted_image,omitempty"` // the image the session booted, in words
	Kernel  string       `json:"kernel_version,omitempty"`
	Steps   []replayStep `json:"steps"` // the ops that returned
	// CrashedAt is the op (from 1) the guest died in (or in the lanes'
	// remount before it); 0: it lived to the trace's end.
	CrashedAt int    `json:"crashed_at,omitempty"`
	CrashedOp string `json:"crashed_op,omitempty"`
	// Report is the kernel's report the dead guest left (nil: it lived,
	// or died without one); Signature is its signature, Want the
	// finding's (kreport.Report.Signature: the kind and the RIP's
	// function, or the first line with its numbers masked).
	Report     *kreport.Report `json:"kernel_report,omitempty"`
	Signature  string          `json:"signature,omitempty"`
	Want       string          `json:"want_signature"`
	Reproduced bool            `json:"reproduced"`
	Verdict    string          `json:"verdict"`
}

// replayKernelCmd is `themisctl replay` of a kernel finding.
func replayKernelCmd(ctx context.Context, g *globals, c *conn, f *themisv1.Finding, image string) error {
	rep, err := replayKernel(ctx, c, f, image)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(os.Stdout, rep)
	}
	return printKernelReplay(os.Stdout, rep)
}

// replayKernel replays kernel finding f on the daemon (the Replay RPC:
// its ops until the guest dies, the report judged against the finding's)
// on image ("": the finding's own).
func replayKernel(ctx context.Context, c *conn, f *themisv1.Finding, image string) (*kernelReplay, error) {
	progress(fmt.Sprintf("replaying %s (%s: this crashes the session's guest) on %s", f.GetId(), f.GetKind(), strings.Join(f.GetLaneSpecs(), ",")))
	return kernelReplayOf(c.Replay(ctx, &themisv1.ReplayRequest{FindingId: f.GetId(), Image: image}))
}

// kernelReplayOf is a Replay response of a kernel finding as the CLI
// shows it.
func kernelReplayOf(r *themisv1.ReplayResponse, err error) (*kernelReplay, error) {
	if err != nil {
		return nil, err
	}
	rep := &kernelReplay{Finding: r.GetFindingId(), Session: r.GetSessionId(), Kind: r.GetKind(), Image: r.GetImage(),
		Booted: imageLine(r.GetBooted()), Kernel: r.GetBooted().GetKernelVersion(), Steps: []replayStep{},
		CrashedAt: int(r.GetCrashedAt()), CrashedOp: r.GetCrashedOp(), Signature: r.GetSignature(), Want: r.GetWantSignature(),
		Reproduced: r.GetReproduced(), Verdict: r.GetVerdict()}
	if r.GetKernel() != nil {
		rep.Report = reportOf(r.GetKernel())
	}
	for _, st := range r.GetSteps() {
		rep.Steps = append(rep.Steps, replayStep{Op: st.GetOp(), Errnos: st.GetErrnos(), Diverged: st.GetDiverged()})
	}
	return rep, nil
}

func printKernelReplay(out io.Writer, r *kernelReplay) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "session\t%s\n", r.Session)
	if r.Booted != "" {
		fmt.Fprintf(w, "image\t%s\n", r.Booted)
	}
	for _, st := range r.Steps {
		fmt.Fprintf(w, "%s\t%s\n", st.Op, strings.Join(st.Errnos, " "))
	}
	if r.CrashedAt > 0 {
		fmt.Fprintf(w, "%s\tthe guest died (op %d)\n", r.CrashedOp, r.CrashedAt)
	}
	if k := r.Report; k != nil {
		fmt.Fprintf(w, "kernel %s\t%s\n", k.Kind, k.Title)
		if k.RIP != "" {
			fmt.Fprintf(w, "RIP\t%s\n", k.RIP)
		}
		if len(k.Trace) > 0 {
			fmt.Fprintf(w, "call trace\t%s\n", strings.Join(k.Trace[:min(4, len(k.Trace))], " < "))
		}
	}
	fmt.Fprintf(w, "reproduced\t%v\n", r.Reproduced)
	fmt.Fprintf(w, "\t%s\n", r.Verdict)
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
