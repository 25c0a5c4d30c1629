package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"google.golang.org/grpc/status"

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

// replayKernel runs a kernel finding's trace on a fresh session with its
// lanes (the lanes remounted before each op after the first when the run
// reverted by remount) and judges the guest's end. The session is
// removed after, unless its guest died: a failed session stays listed,
// its reason the death (a dead explore worker's does too).
func replayKernel(ctx context.Context, c *conn, f *themisv1.Finding, image string) (*kernelReplay, error) {
	progress(fmt.Sprintf("replaying %s (%s: this crashes the session's guest) on %s", f.GetId(), f.GetKind(), strings.Join(f.GetLaneSpecs(), ",")))
	cs, remove, err := replaySession(ctx, c, f, image, false)
	if err != nil {
		return nil, err
	}
	id := cs.GetId()
	rep := &kernelReplay{Finding: f.GetId(), Session: id, Kind: f.GetKind(), Image: image, Want: reportOf(f.GetKernel()).Signature(),
		Booted: imageLine(cs.GetImage()), Kernel: cs.GetImage().GetKernelVersion(), Steps: []replayStep{}}
	failed := false
	defer func() {
		if !failed {
			remove()
		}
	}()
	for i, s := range f.GetTrace() {
		err := error(nil)
		if i > 0 && f.GetRevert() == "remount" {
			err = remountLanes(ctx, c, id)
		}
		var step replayStep
		if err == nil {
			step, err = replayStepOf(ctx, c, id, f, s)
		}
		if err != nil {
			st, r, gerr := guestEnd(ctx, c, id, err)
			if gerr != nil {
				return nil, fmt.Errorf("finding %s: op %d: %w", f.GetId(), i+1, gerr)
			}
			failed = st == themisv1.Session_STATE_FAILED
			rep.CrashedAt, rep.CrashedOp, rep.Report = i+1, s, r
			break
		}
		rep.Steps = append(rep.Steps, step)
	}
	rep.judge(f)
	return rep, nil
}

// guestEnd asks the daemon about session id after applyErr: its state when
// its guest is gone (failed: the guest died; unresponsive: a call got no
// answer) and the kernel report the guest left (nil: none), read from
// applyErr or the session's reason (reportIn); gerr is applyErr when the
// guest is not gone (another error).
func guestEnd(ctx context.Context, c *conn, id string, applyErr error) (st themisv1.Session_State, r *kreport.Report, gerr error) {
	gs, err := c.GetSession(ctx, &themisv1.GetSessionRequest{SessionId: id})
	if err != nil {
		return 0, nil, errors.Join(applyErr, err)
	}
	st = gs.GetSession().GetState()
	if st != themisv1.Session_STATE_FAILED && st != themisv1.Session_STATE_UNRESPONSIVE {
		return st, nil, applyErr
	}
	if r := reportIn(applyErr); r != nil {
		return st, r, nil
	}
	return st, reportInText(gs.GetSession().GetReason()), nil
}

// judge says whether the replay reproduced the finding: the guest died
// with a report of the finding's signature (the first line is not
// compared as it is: it holds addresses, CPU and PID numbers).
func (r *kernelReplay) judge(f *themisv1.Finding) {
	switch {
	case r.CrashedAt == 0:
		r.Verdict = fmt.Sprintf("not reproduced: the %d ops ran and the guest lives", len(f.GetTrace()))
	case r.Report == nil:
		r.Verdict = fmt.Sprintf("not reproduced: the guest died at op %d without a kernel report", r.CrashedAt)
	default:
		r.Signature = r.Report.Signature()
		r.Reproduced = r.Signature == r.Want
		r.Verdict = fmt.Sprintf("reproduced: the kernel crashed again at op %d: %s", r.CrashedAt, r.Report.Title)
		if !r.Reproduced {
			r.Verdict = fmt.Sprintf("not reproduced: the kernel crashed at op %d with another report (%s, want %s): %s", r.CrashedAt, r.Signature, r.Want, r.Report.Title)
		}
	}
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

// reportIn is the kernel report an API error carries: a KernelReport in
// the status's details where the daemon attaches one, else read from the
// console lines the message ends with (vmm.GuestDiedError's text, which
// holds a report whole). Nil: none.
func reportIn(err error) *kreport.Report {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if k, ok := d.(*themisv1.KernelReport); ok {
			return reportOf(k)
		}
	}
	return reportInText(st.Message())
}

// reportInText reads a kernel report from the console lines a dead
// guest's error text ends with ("console:" and the lines indented), nil
// when there is none.
func reportInText(msg string) *kreport.Report {
	_, console, ok := strings.Cut(msg, "\nconsole:\n")
	if !ok {
		return nil
	}
	lines := strings.Split(console, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	r, ok := kreport.Parse(strings.Join(lines, "\n"))
	if !ok {
		return nil
	}
	return r
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
// does one (replayKernel), any other by its lanes' errnos and states.
func stockReplay(ctx context.Context, c *conn, f *themisv1.Finding) (*repro.Stock, error) {
	if f.GetKernel() != nil {
		rep, err := replayKernel(ctx, c, f, "")
		if err != nil {
			return nil, err
		}
		return &repro.Stock{Kernel: rep.Kernel, Reproduced: rep.Reproduced}, nil
	}
	rep, err := replayOnStock(ctx, c, f)
	if err != nil {
		return nil, err
	}
	return &repro.Stock{Kernel: rep.Kernel, Reproduced: rep.Reproduced}, nil
}

// reproReport is a kernel finding's report for its reproducer (nil: not a
// kernel finding).
func reproReport(k *themisv1.KernelReport) *repro.KernelReport {
	if k == nil {
		return nil
	}
	return &repro.KernelReport{Kind: k.GetKind(), Title: k.GetTitle(), RIP: k.GetRip(), Panic: k.GetPanic(), Trace: k.GetTrace(), Text: k.GetText()}
}
