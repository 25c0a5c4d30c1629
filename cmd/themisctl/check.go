package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/junit"
)

// checkOutputs are check's outputs for CI besides stdout.
type checkOutputs struct {
	junit          string
	failOnFindings bool
}

// newCheck is `themisctl check`.
func newCheck(g *globals) *cobra.Command {
	var req themisv1.CheckRequest
	var lanes, parts string
	var budget time.Duration
	var out checkOutputs
	cmd := &cobra.Command{
		Use:   "check --fs LANES",
		Short: "Run what a filesystem needs checked, in one time budget: clock rules, a differential against a reference lane, remount and fsck references, crash states",
		Long: `check runs, side by side and in one time budget, every part that applies to the lanes
(docs/check.md): the clock sweep's rule cells; the differential explore of the lanes (one lane is
compared with a reference lane of another family, which check names); each lane alone under the
remount and host-fsck references; and each lane with a host checker under the crash states of its
persistence ops. Kernel crashes are findings in every part. Each part's findings and time are in
the summary; --fail-on-findings exits 1 when any part found something, 2 when one failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Lanes, req.Parts = splitList(lanes), splitList(parts)
			if len(req.Lanes) == 0 {
				return errors.New("--fs: name the lanes to check (e.g. --fs exfat, or --fs ext4 --image my-ext4)")
			}
			if budget < 0 || budget%time.Second != 0 || budget > 7*24*time.Hour {
				return fmt.Errorf("--budget %s: want whole seconds, up to 168h", budget)
			}
			req.BudgetSeconds = int32(budget / time.Second)
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				return runCheck(ctx, g, c, &req, out)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&lanes, "fs", "", "the lanes under test, comma-separated lane specs (exfat, ext4, f2fs, ...); one lane is compared with a reference lane of another family")
	fl.StringVar(&req.Reference, "reference", "", "the lane the differential adds: empty for one of another family when one lane is given (none for two or more), none, or a lane spec")
	addImageFlag(fl, &req.Image)
	fl.DurationVar(&budget, "budget", 10*time.Minute, "wall-clock budget of the parts' searches (boots and the minimization of findings come on top)")
	fl.Int32Var(&req.Depth, "depth", 2, "the depth of the explore parts' full tree (1..10); rounds of random walks to depth 10 follow it while time is left")
	fl.Uint64Var(&req.Seed, "seed", 1, "seed of the explore parts' operation policy")
	fl.Int32Var(&req.Workers, "workers", 0, "guests per explore part (0: auto: one when parts run side by side, else one per CPU)")
	fl.Int32Var(&req.Parallel, "parallel", 0, "parts that run at once (0: auto, up to 3 and the sessions the daemon has room for; 1: one after another)")
	fl.StringVar(&parts, "parts", "", "part kinds to run, comma-separated: clock, differential, reference, crash (default all)")
	fl.Int32Var(&req.MemoryMib, "memory", 128, "guest RAM in MiB")
	fl.StringVar(&req.Backend, "backend", "auto", "auto (kvm on hardware virtualization, else qemu), qemu or kvm")
	fl.StringVar(&out.junit, "junit", "", "also write the outcome as a JUnit XML report to this file: one suite per part, one test case per finding signature and per lane")
	fl.BoolVar(&out.failOnFindings, "fail-on-findings", false, "exit 1 when a part found anything (a part that failed: 2)")
	return cmd
}

// checkRun is what a check stream has shown so far.
type checkRun struct {
	json   bool
	st     *statusLine
	start  time.Time            // when the check began
	budget time.Duration        // the check's
	parts  map[string]partClock // the running parts' starts and budgets, by name
	sum    *themisv1.CheckSummary
	found  findingLog
	image  string    // the request's --image, for the clock cells' commands
	w      io.Writer // findings and clock cells (stdout)
}

// partClock is a running part's start and budget.
type partClock struct {
	start time.Time
	limit time.Duration
}

func (r *checkRun) event(m *themisv1.CheckResponse) error {
	switch ev := m.GetEvent().(type) {
	case *themisv1.CheckResponse_PartStarted:
		if r.parts == nil {
			r.parts = map[string]partClock{}
		}
		r.parts[m.GetPart()] = partClock{start: time.Now(), limit: time.Duration(ev.PartStarted.GetBudgetS() * float64(time.Second))}
		r.st.Step(fmt.Sprintf("==> %s (budget %s): %s", m.GetPart(), secondsText(ev.PartStarted.GetBudgetS()), ev.PartStarted.GetWhat()))
	case *themisv1.CheckResponse_Progress:
		p := ev.Progress
		line := fmt.Sprintf("%s: states %d  unique %d  findings %d  %.1f states/s  %.0fs", m.GetPart(), p.GetStates(), p.GetUniqueStates(), p.GetFindings(), p.GetStatesPerSec(), p.GetElapsedS())
		pc := r.parts[m.GetPart()]
		if left := timeLeft(pc.limit, time.Since(pc.start), 0, 0); left != "" {
			line += "  part " + left
		}
		if left := timeLeft(r.budget, time.Since(r.start), 0, 0); left != "" {
			line += ", check " + left
		}
		r.st.Update(line)
	case *themisv1.CheckResponse_Finding:
		r.st.Clear()
		update := r.found.add(ev.Finding)
		if !r.json {
			printStreamed(r.w, ev.Finding, update)
		}
	case *themisv1.CheckResponse_Cell:
		r.st.Clear()
		if !r.json {
			printRuleCell(r.w, ev.Cell, r.image)
		}
	case *themisv1.CheckResponse_PartDone:
		delete(r.parts, m.GetPart())
		r.st.Step(fmt.Sprintf("<== %s: %s", m.GetPart(), partStatus(ev.PartDone)))
	case *themisv1.CheckResponse_Summary:
		r.sum = ev.Summary
	}
	return nil
}

// printRuleCell prints a clock cell against its lane's rule.
func printRuleCell(w io.Writer, c *themisv1.SweepCell, image string) {
	fmt.Fprintf(w, "clock %s  %s\n", c.GetLane(), ruleCellDetail(c))
	if k := c.GetKernel(); k != nil {
		fmt.Fprintf(w, "  kernel: %s\n", k.GetTitle())
	}
	fmt.Fprintf(w, "  reproduce: %s\n", ruleCellCommand(c, image))
}

// ruleCellDetail says what a clock cell against its rule shows.
func ruleCellDetail(c *themisv1.SweepCell) string {
	return fmt.Sprintf("%s %s at %s (%d.%09d): %s, the rule says %s", c.GetOp(), c.GetField(), c.GetName(), c.GetValue(), c.GetValueNs(), c.GetVerdict(), c.GetExpected())
}

// ruleCellCommand is the sweep that runs a clock cell again (a plan value
// of several steps, a rollback, runs as its last step's time).
func ruleCellCommand(c *themisv1.SweepCell, image string) string {
	cmd := fmt.Sprintf("themisctl sweep clock --fs %s --ops %s --values %d.%09d", c.GetLane(), c.GetOp(), c.GetValue(), c.GetValueNs())
	if image != "" {
		cmd += " --image " + image
	}
	return cmd
}

// partStatus is a part's outcome in a few words.
func partStatus(p *themisv1.CheckPart) string {
	switch {
	case p.GetSkipped() != "":
		return "skipped: " + p.GetSkipped()
	case p.GetError() != "":
		return fmt.Sprintf("failed after %s: %s", secondsText(p.GetElapsedS()), p.GetError())
	}
	s := fmt.Sprintf("%d finding(s) in %s", p.GetFindings(), secondsText(p.GetElapsedS()))
	if e := p.GetExplore(); e != nil {
		s += fmt.Sprintf(", last run depth %d: %d states (%d unique)", p.GetDepth(), e.GetStates(), e.GetUniqueStates())
		if p.GetWalks() > 0 {
			s += fmt.Sprintf(", after the full tree %d round(s) of walks", p.GetWalks())
		}
	}
	if sw := p.GetSweep(); sw != nil {
		s += fmt.Sprintf(", %d cells", sw.GetCells())
	}
	if p.GetStopped() != "" {
		s += ", stopped: " + p.GetStopped()
	}
	if p.GetSetupFailed() != "" {
		s += "; every run from the empty root: " + p.GetSetupFailed()
	}
	if n := p.GetUnconfirmedHangs(); n > 0 {
		s += fmt.Sprintf("; %d hung task(s) not confirmed (did not recur in a fresh guest: not findings)", n)
	}
	return s
}

func secondsText(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// runCheck streams one check and prints its summary.
func runCheck(ctx context.Context, g *globals, c *conn, req *themisv1.CheckRequest, out checkOutputs) error {
	stream, err := c.Check(ctx, req)
	if err != nil {
		return err
	}
	run := &checkRun{json: g.json, st: newStatusLine(), start: time.Now(), budget: time.Duration(req.GetBudgetSeconds()) * time.Second,
		w: os.Stdout, image: req.GetImage()}
	err = client.Drain(stream.Recv, run.event)
	run.st.Clear()
	if err != nil {
		return err
	}
	if run.sum == nil {
		return errors.New("check: the daemon ended the stream without a summary")
	}
	if out.junit != "" {
		if err := writeCheckJUnit(out.junit, run.sum, req.GetImage()); err != nil {
			return err
		}
	}
	if g.json {
		err = writeProtoJSON(run.sum)
	} else {
		err = printCheckSummary(run.sum)
	}
	if err != nil {
		return err
	}
	return checkExit(run.sum, out.failOnFindings)
}

// checkExit is check's exit: 2 when a part failed, 1 with
// --fail-on-findings when a part found something.
func checkExit(sum *themisv1.CheckSummary, failOnFindings bool) error {
	if n := sum.GetFailed(); n > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("check: %d part(s) failed", n)}
	}
	if n := sum.GetFindings(); failOnFindings && n > 0 {
		return &exitError{code: exitFindings, err: fmt.Errorf("check: %d finding(s) (--fail-on-findings)", n)}
	}
	return nil
}

func printCheckSummary(sum *themisv1.CheckSummary) error {
	w := newTable()
	fmt.Fprintf(w, "\ncheck of %s: %d finding(s) in %s (budget %s)\n", strings.Join(sum.GetLanes(), ","), sum.GetFindings(), secondsText(sum.GetElapsedS()), secondsText(sum.GetBudgetS()))
	if sum.GetReference() != "" {
		fmt.Fprintf(w, "reference lane %s (%s)\n", sum.GetReference(), sum.GetReferenceWhy())
	}
	if n := sum.GetParallel(); n > 0 {
		fmt.Fprintf(w, "parts at once: %d (%s)\n", n, sum.GetParallelWhy())
	}
	fmt.Fprintf(w, "PART\tBUDGET\tTIME\tFINDINGS\tOUTCOME\n")
	for _, p := range sum.GetParts() {
		budget, took := "-", "-"
		if p.GetSkipped() == "" {
			budget, took = secondsText(p.GetBudgetS()), secondsText(p.GetElapsedS())
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", p.GetName(), budget, took, p.GetFindings(), partStatus(p))
	}
	if sum.GetStopped() != "" {
		fmt.Fprintf(w, "stopped: %s\n", sum.GetStopped())
	}
	return w.Flush()
}

// writeCheckJUnit writes the check as a JUnit XML report: one suite per
// part that ran.
func writeCheckJUnit(path string, sum *themisv1.CheckSummary, image string) error {
	var runs []junit.Run
	for _, p := range sum.GetParts() {
		if p.GetSkipped() != "" {
			continue
		}
		r := junit.Run{Name: "check " + p.GetName(), Lanes: p.GetLanes(), Seconds: p.GetElapsedS(),
			Properties: map[string]string{"kind": p.GetKind(), "budget_s": fmt.Sprintf("%.0f", p.GetBudgetS()), "stopped": p.GetStopped(), "error": p.GetError()}}
		for _, f := range sum.GetFound() {
			if e := p.GetExplore(); e == nil || !slices.Contains(e.GetSessions(), f.GetSessionId()) {
				continue
			}
			if jf, ok := junitFinding(f, p.GetLanes()); ok {
				r.Findings = append(r.Findings, jf)
			}
		}
		for _, c := range p.GetCells() {
			r.Findings = append(r.Findings, junit.Finding{Kind: "clock:" + c.GetField(), Lane: c.GetLane(),
				Signature: fmt.Sprintf("clock %s %s %s %s", c.GetLane(), c.GetOp(), c.GetField(), c.GetName()),
				Detail:    ruleCellDetail(c), Reproduce: ruleCellCommand(c, image)})
		}
		runs = append(runs, r)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	if err := junit.WriteSuites(f, runs); err != nil {
		return errors.Join(fmt.Errorf("--junit: %w", err), f.Close())
	}
	return f.Close()
}
