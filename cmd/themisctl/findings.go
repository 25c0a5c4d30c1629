package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// newFindings is `themisctl findings`.
func newFindings(g *globals) *cobra.Command {
	var session string
	var statuses []string
	cmd := &cobra.Command{
		Use: "findings", Short: "List stored findings", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, st := range statuses {
				if !slices.Contains(api.FindingStatuses, st) {
					return fmt.Errorf("--status: %q: want one of %s", st, strings.Join(api.FindingStatuses, ", "))
				}
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				all, err := listFindings(ctx, c, session)
				if err != nil {
					return err
				}
				resp := &themisv1.ListFindingsResponse{Findings: withStatus(all, statuses)}
				if g.json {
					return writeProtoJSON(resp)
				}
				for _, f := range resp.GetFindings() {
					printFinding(os.Stdout, f)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only this session's findings")
	cmd.Flags().StringSliceVar(&statuses, "status", nil, "only findings of these statuses, comma-separated (new, reported, fixed-upstream, expected)")
	cmd.AddCommand(newFindingsExport(g), newFindingsStatus(g))
	return cmd
}

// withStatus keeps the findings whose status is one of statuses (none:
// all). A finding stored before findings were counted across runs has no
// status and counts as new.
func withStatus(fs []*themisv1.Finding, statuses []string) []*themisv1.Finding {
	if len(statuses) == 0 {
		return fs
	}
	var out []*themisv1.Finding
	for _, f := range fs {
		if slices.Contains(statuses, api.StatusOf(f.GetStatus())) {
			out = append(out, f)
		}
	}
	return out
}

// newFindingsStatus is `themisctl findings status`: a user's word on a
// finding across runs, kept in the daemon's ledger.
func newFindingsStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status FINDING STATUS",
		Short: "Say what a finding is, across runs: new, reported, fixed-upstream or expected (kept in the ledger)",
		Long: `Say what a finding is, for it and every finding of it across runs (the
same signature, lane specs and policy): new (the default), reported,
fixed-upstream or expected. The ledger keeps it; findings and GetFinding
show it.`,
		Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return withPrefix(api.FindingStatuses, toComplete), cobra.ShellCompDirectiveNoFileComp
			}
			return g.completeIDs(listFindingIDs, false)(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.SetFindingStatus(ctx, &themisv1.SetFindingStatusRequest{FindingId: args[0], Status: args[1]})
				if err != nil {
					return err
				}
				if g.json {
					return writeProtoJSON(resp)
				}
				f := resp.GetFinding()
				fmt.Printf("finding %s: %s (%s)\n", f.GetId(), f.GetStatus(), f.GetSignature())
				return nil
			})
		},
	}
}

// listFindings lists every stored finding of session ("": all), page by
// page.
func listFindings(ctx context.Context, c *conn, session string) ([]*themisv1.Finding, error) {
	var all []*themisv1.Finding
	req := &themisv1.ListFindingsRequest{SessionId: session, PageSize: api.MaxPageSize}
	for {
		page, err := c.ListFindings(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, page.GetFindings()...)
		if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
			return all, nil
		}
	}
}

// newReplay is `themisctl replay`.
func newReplay(g *globals) *cobra.Command {
	var po passesOptions
	var trace, lanes, image, crashImage string
	cmd := &cobra.Command{
		Use: "replay FINDING | replay --passes N --fs LANES --trace 'OP; OP'", Short: "Reproduce a finding: a fresh guest with its lanes, its trace, the per-lane results", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (trace != "") {
				return errors.New("replay: name a finding or give --trace (with --passes), not both")
			}
			if trace != "" && !cmd.Flags().Changed("passes") {
				return errors.New("--trace: only with --passes")
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				fr := &themisv1.GetFindingResponse{Finding: &themisv1.Finding{Id: "trace", LaneSpecs: splitList(lanes), Trace: splitTrace(trace)}}
				if len(args) == 1 {
					var err error
					if fr, err = c.GetFinding(ctx, &themisv1.GetFindingRequest{FindingId: args[0]}); err != nil {
						return err
					}
				}
				image = findingImage(fr.GetFinding(), image)
				if cmd.Flags().Changed("passes") {
					po.image = image
					r, err := replayPasses(ctx, c, fr.GetFinding(), po)
					if err != nil {
						return err
					}
					if g.json {
						return writeProtoJSON(r)
					}
					return printPasses(r)
				}
				if fr.GetFinding().GetCrash() != nil {
					return replayCrashCmd(ctx, g, c, fr.GetFinding(), crashImage)
				}
				if fr.GetFinding().GetKernel() != nil {
					return replayKernelCmd(ctx, g, c, fr.GetFinding(), image)
				}
				rep, err := replay(ctx, c, fr.GetFinding(), image)
				if err != nil {
					return err
				}
				if g.json {
					return writeProtoJSON(rep)
				}
				return printReplay(rep)
			})
		},
	}
	cmd.Flags().IntVar(&po.n, "passes", 9, "replay fidelity: run the trace this many times from one checkpoint and count the distinct whole-disk (after a sync) and RAM hashes they leave (docs/replay.md)")
	cmd.Flags().StringVar(&po.clock, "clock", "both", "with --passes: the guest clock free, pinned (set by the agent before every op), or both")
	cmd.Flags().StringVar(&po.icount, "icount", "off", "with --passes: QEMU's instruction counting (-icount shift=0,sleep=off: guest time follows instructions) off, on, or both (a session each)")
	cmd.Flags().StringVar(&trace, "trace", "", "with --passes and no finding: the ops to replay, ';'-separated, in the short form of `themisctl apply`")
	cmd.Flags().StringVar(&lanes, "fs", "ext2", "with --trace: the lane specs")
	cmd.Flags().StringVar(&crashImage, "crash-image", "", "a crash finding: also write its crash state's disk image (sparse) to this file")
	cmd.Flags().Var(imageValue{&image}, "image", "replay on this guest image (a name or key `themisctl guest list` shows, or an image directory, given with a /: another kernel or flavour) instead of the one the finding was found on (a patched image) or the lanes' own")
	return cmd
}

// replay replays a finding in a fresh session of its lanes on the daemon
// (the Replay RPC: exploration.Replay), on image ("": the finding's own),
// and says what it showed.
func replay(ctx context.Context, c *conn, f *themisv1.Finding, image string) (*themisv1.ReplayResponse, error) {
	progress(fmt.Sprintf("replaying %s (%s) on %s", f.GetId(), f.GetKind(), strings.Join(f.GetLaneSpecs(), ",")))
	return c.Replay(ctx, &themisv1.ReplayRequest{FindingId: f.GetId(), Image: image})
}

func printReplay(rep *themisv1.ReplayResponse) error {
	w := newTable()
	if booted := imageLine(rep.GetBooted()); booted != "" {
		fmt.Fprintf(w, "image\t%s\n", booted)
	}
	for _, st := range rep.GetSteps() {
		mark := ""
		if st.GetDiverged() {
			mark = "  <- errno differs"
		}
		fmt.Fprintf(w, "%s\t%s%s\n", st.GetOp(), strings.Join(st.GetErrnos(), " "), mark)
	}
	for _, lane := range slices.Sorted(maps.Keys(rep.GetRoots())) {
		fmt.Fprintf(w, "root %s\t%s\n", lane, rep.GetRoots()[lane])
	}
	if rep.GetRevert() == "remount" {
		fmt.Fprintf(w, "revert\tremount (lanes remounted before each op)\n")
	}
	if rep.GetReference() != "" {
		fmt.Fprintf(w, "self-reference\t%s\n", rep.GetReference())
	}
	if rep.GetNotReplayable() != "" {
		fmt.Fprintf(w, "not replayable\t%s\n", rep.GetNotReplayable())
	}
	fmt.Fprintf(w, "reproduced\t%v\n", rep.GetReproduced())
	return w.Flush()
}

// printFinding shows a stored finding: its latest trace (minimized once
// minimization is done with it) and how to reproduce it.
func printFinding(w io.Writer, f *themisv1.Finding) {
	fmt.Fprintf(w, "finding %s  %s  %s\n", f.GetId(), f.GetKind(), f.GetDetail())
	if f.GetPath() != "" || f.GetField() != "" {
		fmt.Fprintf(w, "  first difference: /%s %s\n", f.GetPath(), f.GetField())
	}
	fmt.Fprintf(w, "  trace %s:\n", traceState(f))
	printTrace(w, f.GetTrace())
	printCrashPoint(w, f)
	printKernelReport(w, f)
	if img := f.GetImage(); img != nil {
		fmt.Fprintf(w, "  image: %s\n", imageLine(img))
	}
	if d := f.GetDuplicateOf(); d != "" {
		fmt.Fprintf(w, "  duplicate of %s (same minimized trace)\n", d)
	}
	if n := f.GetTimesSeen(); n > 1 {
		fmt.Fprintf(w, "  seen in %d runs: first %s (%s), last %s\n", n, f.GetFirstSeen().AsTime().Format(time.DateTime), f.GetFirstId(), f.GetLastSeen().AsTime().Format(time.DateTime))
	}
	if st := f.GetStatus(); st != "" && st != "new" {
		fmt.Fprintf(w, "  status: %s (since %s)\n", st, f.GetStatusTime().AsTime().Format(time.DateTime))
	}
	fmt.Fprintf(w, "  reproduce: themisctl replay %s; without Themis: themisctl findings export %s\n", f.GetId(), f.GetId())
}

// printStreamed shows a finding as explore streams it: when found, with the
// trace as found; when its minimized update comes, with the minimized trace.
func printStreamed(w io.Writer, f *themisv1.Finding, update bool) {
	if !update {
		fmt.Fprintf(w, "finding %s  %s  %s\n", f.GetId(), f.GetKind(), f.GetDetail())
		if f.GetPath() != "" || f.GetField() != "" {
			fmt.Fprintf(w, "  first difference: /%s %s\n", f.GetPath(), f.GetField())
		}
		fmt.Fprintf(w, "  trace %s:\n", traceState(f))
		printTrace(w, f.GetTrace())
		printCrashPoint(w, f)
		printKernelReport(w, f)
		if !f.GetMinimized() && f.GetCrash() == nil && f.GetKernel() == nil {
			fmt.Fprintln(w, "  (minimized after the search)")
		}
		return
	}
	fmt.Fprintf(w, "finding %s  %s\n", f.GetId(), traceState(f))
	if !f.GetMinimized() || f.GetCrash() != nil {
		fmt.Fprintf(w, "  %s\n", f.GetDetail())
	}
	printTrace(w, f.GetTrace())
	if d := f.GetDuplicateOf(); d != "" {
		fmt.Fprintf(w, "  duplicate of %s (same minimized trace)\n", d)
	}
	fmt.Fprintf(w, "  reproduce: themisctl replay %s\n", f.GetId())
}

// traceState says which trace a finding carries.
func traceState(f *themisv1.Finding) string {
	n := len(f.GetTrace())
	found := len(f.GetFoundTrace())
	switch {
	case f.GetMinimized():
		return fmt.Sprintf("minimized to %s from %d as found", opCount(n), max(found, n))
	case found > 0 && found != n:
		return fmt.Sprintf("as found, %s (not minimized)", opCount(found))
	}
	return fmt.Sprintf("as found, %s", opCount(n))
}

func opCount(n int) string {
	if n == 1 {
		return "1 op"
	}
	return fmt.Sprintf("%d ops", n)
}

func printTrace(w io.Writer, trace []string) {
	for i, op := range trace {
		fmt.Fprintf(w, "  %d. %s\n", i+1, op)
	}
}

// splitTrace splits a ';'-separated trace into its ops.
func splitTrace(s string) []string {
	var out []string
	for _, op := range strings.Split(s, ";") {
		if op = strings.TrimSpace(op); op != "" {
			out = append(out, op)
		}
	}
	return out
}
