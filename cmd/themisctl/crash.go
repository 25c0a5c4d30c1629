package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
)

// newCrash is `themisctl crash`.
func newCrash(g *globals) *cobra.Command {
	var req themisv1.CrashRequest
	var lanes, setup, trace string
	var failOnFindings bool
	cmd := &cobra.Command{
		Use:   "crash --trace 'OP; OP; fsync F'",
		Short: "Check every disk a power cut could leave while a trace runs (write log, flush epochs, host fsck)",
		Long: `Run the setup ops and a sync, checkpoint, log every write and flush each lane's
disk receives while the trace runs, and check each crash state of the log
(docs/crash.md): the writes of every completed flush epoch, then prefixes and
(up to --crash-writes) reordered subsets of the writes in flight. Each state is
mounted in the guest on a spare disk (the kernel replays its journal or log),
read for what the trace's final fsync made durable, unmounted, then checked by
the filesystem's read-only fsck on the host (--host-replay: the host alone).
Not clean states are printed as they come; the
summary gives writes, flushes, states and how many were not clean per lane.

Each lane and trace with a bad crash state (not clean, or it lost what the
trace's final fsync made durable) is a crash finding, stored in the ledger with
the trace, the persistence point and the write subset; the first --minimize of
them get their trace shrunk. themisctl replay FINDING checks that state again in
a fresh session; themisctl findings export FINDING writes it as a disk image
with a check script.

A state whose mount (or the reads in it) crashes the guest's kernel has the
verdict kernel-crash, with the kernel's report, and a crash finding of its own;
the run goes on in a fresh session (the setup and trace run again; the lane's
later states are checked there when its write log has the same shape, else
they are said NOT CHECKED). A guest that stops answering costs one call bound
(2 min): guest-hung.

--atomic adds the atomicity oracle: a state equal to none of the lane's states
at the trace's op boundaries is a finding.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Lanes, req.Setup, req.Trace = splitList(lanes), splitTrace(setup), splitTrace(trace)
			if (len(req.Trace) == 0) == (req.Workload == "") {
				return fmt.Errorf("--trace 'write f 0 4096 0x55; fsync f' or --workload ace:seq1: one of them")
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				sum, err := runCrash(ctx, g, c, &req)
				if err != nil {
					return err
				}
				if failOnFindings && notClean(sum) > 0 {
					return &exitError{code: exitFindings, err: fmt.Errorf("crash: %d crash state(s) not clean (--fail-on-findings)", notClean(sum))}
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&lanes, "fs", "ext2", "lane specs, comma-separated (each needs a host fsck: ext2/3/4, btrfs, xfs, exfat, f2fs, minix)")
	f.StringVar(&setup, "setup", "", "ops before the checkpoint, ';'-separated (a sync follows them)")
	f.StringVar(&trace, "trace", "", "the ops to run with the write log on, ';'-separated; end them in a persistence op (fsync, fdatasync, sync)")
	f.StringVar(&req.Workload, "workload", "", "instead of --trace: ace:seq1 or ace:seq2 (every sequence of 1 or 2 ACE core ops, each followed by a persistence op, from the files they need; docs/crash.md)")
	f.Int32Var(&req.MaxWorkloads, "max-workloads", 0, "with --workload: run at most this many (0: all)")
	f.Int32Var(&req.CrashWrites, "crash-writes", 0, "the most in-flight writes of one flush epoch a reordered state keeps (0: 2; -1: prefixes only; at most 8)")
	f.Int32Var(&req.MaxStates, "max-states", 0, "crash states per lane (0: 64; at most 4096), prefixes first")
	f.Int32Var(&req.MemoryMib, "memory", 0, "guest RAM in MiB (default 128)")
	addImageFlag(f, &req.Image)
	f.Int32Var(&req.Minimize, "minimize", 0, "crash findings whose trace to shrink by delta debugging, first found first (0: 4; -1: none; at most 64)")
	f.BoolVar(&req.Atomic, "atomic", false, "also compare each mounted crash state with the lane's state before the trace and after each op: one equal to none is a finding (the walks read every file, so the trace's writes can differ from a run without)")
	f.BoolVar(&req.HostReplay, "host-replay", false, "check each state on the host alone (e2fsck -E journal_only on ext3/4) instead of mounting it in the guest first")
	f.BoolVar(&failOnFindings, "fail-on-findings", false, "exit 1 when a crash state is not clean (errors exit 2)")
	return cmd
}

// runCrash streams one crash run: not-clean states as they come (every
// result with --json), then the summary.
func runCrash(ctx context.Context, g *globals, c *conn, req *themisv1.CrashRequest) (*themisv1.CrashSummary, error) {
	progress("checking the crash states of " + strings.Join(req.GetLanes(), ","))
	stream, err := c.Crash(ctx, req)
	if err != nil {
		return nil, err
	}
	var sum *themisv1.CrashSummary
	err = client.Drain(stream.Recv, func(r *themisv1.CrashResponse) error {
		if s := r.GetSummary(); s != nil {
			sum = s
		}
		if f := r.GetFinding(); f != nil {
			if g.json {
				return writeProtoJSONLine(f)
			}
			printStreamed(os.Stdout, f, f.GetMinimized())
			return nil
		}
		res := r.GetResult()
		switch {
		case res == nil:
			return nil
		case g.json:
			return writeProtoJSONLine(res)
		case res.GetVerdict() != api.CrashClean || strings.HasPrefix(res.GetDurability(), "LOST") || res.GetAtomicity() == api.NotAtBoundary:
			printCrashResult(os.Stdout, res)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if sum == nil {
		return nil, fmt.Errorf("crash: the daemon ended the stream without a summary")
	}
	if g.json {
		return sum, writeProtoJSONLine(sum)
	}
	return sum, printCrashSummary(sum)
}

func printCrashResult(w io.Writer, r *themisv1.CrashResult) {
	fmt.Fprintf(w, "%s workload %d state %d %s: after %d flush(es), %s, in-flight writes %v of %v\n    trace: %s\n", r.GetLane(), r.GetWorkload(),
		r.GetIndex(), r.GetVerdict(), r.GetFlushes(), r.GetKind(), r.GetInFlight(), r.GetEpoch(), strings.Join(r.GetTrace(), "; "))
	if d := r.GetDurability(); d != "" {
		fmt.Fprintf(w, "    durability: %s\n", d)
	}
	if a := r.GetAtomicity(); a != "" {
		fmt.Fprintf(w, "    op boundary: %s\n", a)
	}
	if k := r.GetKernel(); k != nil {
		fmt.Fprintf(w, "    kernel: %s (session %s ended failed; the run went on in a fresh one)\n", reportOf(k).Summary(), r.GetSessionId())
		for _, f := range k.GetTrace()[:min(4, len(k.GetTrace()))] {
			fmt.Fprintf(w, "      %s\n", f)
		}
		return
	}
	lines := strings.Split(strings.TrimSpace(r.GetOutput()), "\n")
	for _, line := range lines[:min(5, len(lines))] {
		fmt.Fprintf(w, "    %s\n", line)
	}
}

func printCrashSummary(s *themisv1.CrashSummary) error {
	w := newTable()
	fmt.Fprintf(w, "LANE\tWRITES\tFLUSHES\tSTATES\tNOT CLEAN\tDURABILITY\tCHECK\n")
	for _, l := range s.GetLanes() {
		states := fmt.Sprint(l.GetStates())
		if l.GetTruncated() {
			states += " (cut at --max-states)"
		}
		durable := fmt.Sprintf("%d checked, %d lost", l.GetDurable(), l.GetLost())
		if l.GetUnnamed() > 0 {
			durable += fmt.Sprintf(", %d lost only a name this fsync does not promise", l.GetUnnamed())
		}
		if l.GetDurableNote() != "" {
			durable += "; " + l.GetDurableNote()
		}
		if l.GetDeaths() > 0 {
			states += fmt.Sprintf(" (%d lost the guest)", l.GetDeaths())
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%s\t%s\n", l.GetLane(), l.GetWrites(), l.GetFlushes(), states, l.GetNotClean(), durable, l.GetCheck())
	}
	for _, l := range s.GetLanes() {
		if l.GetSkipped() > 0 {
			fmt.Fprintf(w, "\n%s: NOT CHECKED\t%s", l.GetLane(), l.GetSkipNote())
		}
	}
	for _, l := range s.GetLanes() {
		if l.GetAtomic() > 0 {
			fmt.Fprintf(w, "\n%s: at an op boundary\t%d of %d states compared", l.GetLane(), l.GetAtBoundary(), l.GetAtomic())
		}
	}
	workloads := fmt.Sprint(s.GetWorkloads())
	if s.GetTruncated() {
		workloads += " (cut at --max-workloads)"
	}
	fmt.Fprintf(w, "\nsession\t%s\nworkloads\t%s\nelapsed\t%.1f s (%.1f crash states/s)\n", s.GetSessionId(), workloads, s.GetElapsedS(), s.GetStatesPerSec())
	if s.GetDeaths() > 0 {
		fmt.Fprintf(w, "guests lost\t%d (sessions %s: each went on in a fresh one)\n", s.GetDeaths(), strings.Join(s.GetSessions(), ", "))
	}
	if p := s.GetPartial(); p != "" {
		fmt.Fprintf(w, "PARTIAL\t%s\n", p)
	}
	fmt.Fprintf(w, "findings\t%d (themisctl findings %s; replay or export each)\n", s.GetFindings(), s.GetSessionId())
	return w.Flush()
}

// notClean counts the crash states of every lane that were not clean, lost
// what was made durable, or (--atomic) matched no op boundary.
func notClean(s *themisv1.CrashSummary) int {
	n := 0
	for _, l := range s.GetLanes() {
		n += int(l.GetNotClean() + l.GetLost() + l.GetAtomic() - l.GetAtBoundary())
	}
	return n
}
