package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/clock"
	"github.com/themisfs/themis/runreport/runproto"
)

// isTerminal reports whether f is a terminal (progress redraws one line there).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// findingLog keeps the findings of an explore stream by id, in the order
// first seen; an update (same id) replaces the earlier version.
type findingLog struct {
	order []string
	byID  map[string]*themisv1.Finding
}

// add records f and reports whether it updates one seen before.
func (l *findingLog) add(f *themisv1.Finding) (update bool) {
	if l.byID == nil {
		l.byID = make(map[string]*themisv1.Finding)
	}
	_, update = l.byID[f.GetId()]
	if !update {
		l.order = append(l.order, f.GetId())
	}
	l.byID[f.GetId()] = f
	return update
}

// list is the findings in the order first seen, each its latest version.
func (l *findingLog) list() []*themisv1.Finding {
	out := make([]*themisv1.Finding, 0, len(l.order))
	for _, id := range l.order {
		out = append(out, l.byID[id])
	}
	return out
}

// newExplore is `themisctl explore`.
func newExplore(g *globals) *cobra.Command {
	var req themisv1.ExploreRequest
	var lanes, timeMode, ops, shard, setup string
	var out exploreOutputs
	var warnIsFinding bool
	cmd := &cobra.Command{
		Use:   "explore",
		Short: "Drive real filesystems through their state space (bounded DFS) and report where they misbehave",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Lanes, req.Ops, req.Setup = splitList(lanes), splitList(ops), splitTrace(setup)
			req.WarnNotFinding = !warnIsFinding
			mode, err := parseTimeMode("--time-mode", timeMode)
			if err != nil {
				return err
			}
			req.TimeMode = mode
			if err := checkFootprints("report-footprints", out.footprints); err != nil {
				return err
			}
			if shard != "" {
				i, n, err := clock.ParseShard(shard)
				if err != nil {
					return fmt.Errorf("--shard: %w", err)
				}
				req.ShardIndex, req.ShardCount = int32(i), int32(n)
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				return runExplore(ctx, g, c, &req, out)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out.junit, "junit", "", "also write the outcome as a JUnit XML report to this file: one test case per finding signature, one per lane (docs/remote-ci.md)")
	fl.BoolVar(&out.failOnFindings, "fail-on-findings", false, "exit 1 when the run found anything (errors exit 2)")
	fl.StringVar(&out.report, "report", "", "also write the run as one self-contained HTML page to this file: configuration, states over time, every finding with its trace, errnos and first difference")
	fl.IntVar(&out.footprints, "report-footprints", defaultFootprints, "with --report: profile the last op of this many findings below the filesystem (sectors written by structure, per lane; each a fresh guest)")
	fl.StringVar(&lanes, "fs", "ext2", "lane specs, comma-separated (ext2, ext4, vfat, btrfs, overlay, ...; ext*:seed=1 and overlay:seed=1 start from a small tree, an overlay lane in its lower layer); two or more are compared with each other")
	fl.Int32Var(&req.Depth, "depth", 2, "operations from the root (1..10)")
	fl.Int32Var(&req.Branching, "branching", 12, "operations tried per state: one of every --ops kind, then more drawn by the seeded policy up to B (so max(B, kinds): 14 by default)")
	fl.StringVar(&ops, "ops", "", "op kinds tried at every state, comma-separated: create_file, write_file, truncate, unlink, mkdir, rmdir, chmod, chown, chgrp, setxattr, removexattr, rename, link, symlink (the Metis set, also \"metis\"; the default) and fsync, fdatasync, sync (\"persistence\": off by default, they change nothing on the disk state explore compares), rename_noreplace, rename_exchange, rename_whiteout (renameat2's flags, \"rename-flags\") write_far, truncate_far (at file size limits, \"far\"; one lane only) collide (a burst of 25 long names with one btrfs name hash in the root) and regrow (a write, a truncate inside it, a grow past the cut: the cut-off bytes must read back as zeros): off by default, check turns them on")
	fl.Int64Var(&req.MaxStates, "max-states", 0, "budget of states (0: no limit)")
	fl.Int32Var(&req.MaxSeconds, "max-seconds", 0, "wall-clock budget (0: no limit)")
	fl.Uint64Var(&req.Seed, "seed", 1, "seed of the operation policy: the same seed gives the same run")
	fl.StringVar(&timeMode, "time-mode", "none", "timestamps in the abstract state: none (Metis parity), mtime, all")
	fl.StringVar(&req.Policy, "policy", "auto", "canonicalization policy: auto (metis plus the differences the lanes' filesystem families declare, docs/filesystems.md), exact (none, every op generated, every errno compared), metis, overlay (metis without the root's nlink) or overlay-dirs (metis without any directory's nlink)")
	fl.BoolVar(&req.Fsck, "fsck", false, "single lane: check the resolved image on the host at every new state (e2fsck -fn; btrfs check --readonly --check-data-csum)")
	fl.BoolVar(&req.Remount, "remount", false, "single lane: the state must survive umount+mount")
	fl.Int32Var(&req.MemoryMib, "memory", 128, "guest RAM in MiB")
	addImageFlag(fl, &req.Image)
	fl.StringVar(&req.Backend, "backend", "auto", "auto (kvm on hardware virtualization, else qemu), qemu or kvm")
	fl.StringVar(&req.Revert, "revert", "auto", "how the search returns to a state: auto (remount on qemu, machine on kvm), machine (restore memory, devices and disks) or remount (umount, pop the overlays, mount: a state is its disk image)")
	fl.StringVar(&shard, "shard", "", "run shard i/n of the search (0-based, e.g. 0/4): the levels above --shard-depth in full, a 1/n share of the ops below; `themisctl explore merge` joins the shards' --json")
	fl.Int32Var(&req.ShardDepth, "shard-depth", 0, "the level whose ops --shard divides (1: the root's ops; 0: 2, or --depth when smaller)")
	fl.Int32Var(&req.Workers, "workers", 0, "guests exploring the one search, each a session (0: auto, one per CPU of the daemon's host, at most 8, as many as the daemon has room for); the states, digest and findings do not depend on it")
	fl.BoolVar(&req.Crash, "crash", false, "check the crash states of every persistence op the search applies (fsync, fdatasync, sync; in --ops by default then): each under a write log on every lane, its crash states checked on the host (docs/crash.md); every lane needs a host fsck; the machine revert")
	fl.Int32Var(&req.CrashWrites, "crash-writes", 0, "with --crash: the most in-flight writes of one flush epoch a reordered state keeps (0: 2; -1: prefixes only; at most 8)")
	fl.Int32Var(&req.CrashMaxStates, "crash-states", 0, "with --crash: crash states per lane and persistence op (0: 64; at most 4096), prefixes first")
	fl.BoolVar(&req.CrashStrict, "crash-strict", false, "with --crash: a dirty crash state is a finding on every lane, also on ext2, vfat, exfat, minix and udf, which a crash may leave for their fsck to repair (by default counted as expected there; a lost fsync or an unreadable state is a finding either way)")
	fl.BoolVar(&warnIsFinding, "warn-is-finding", true, "a WARN in the guest kernel ends the guest as an Oops does: the op that ran is a kernel finding with the report (false: panic_on_warn=0, the kernel goes on)")
	fl.Int32Var(&req.Walks, "walks", 0, "bounded random walks instead of the full tree: this many ops at the root, then one op that leads to a new state at every state, down to --depth (which may then be up to 10); under the remount revert without --remount and --fsck, half the steps run in the mount of the step before (same-mount ops); 0: the full tree")
	fl.StringVar(&setup, "setup", "", "ops applied on every lane before the root, ';'-separated, in the short form of traces (e.g. 'mkdir d-00 0755; write f-00 0 1000 0x61 creat; sync'; Metis kinds and fsync, fdatasync, sync, at most 64, each must succeed everywhere; a sync makes the root durable, and --crash checks no setup op): the search starts from the tree they make, every finding's trace starts with them")
	fl.BoolVar(&req.LazyRestore, "lazy-restore", false, "skip the restore after an op that failed on every lane and changed nothing (faster on TCG; hidden state may drift)")
	cmd.AddCommand(newExploreMerge(g))
	return cmd
}

// exploreRun is what an explore stream has shown so far: progress on
// stderr (one redrawn line on a terminal), findings on stdout as they come
// (unless --json), and the summary at the end.
type exploreRun struct {
	json     bool
	st       *statusLine
	req      *themisv1.ExploreRequest // its bounds, for the time left
	found    findingLog
	sum      *themisv1.ExploreSummary
	progress []*themisv1.ExploreProgress // for --report
}

func (e *exploreRun) event(r *themisv1.ExploreResponse) error {
	switch ev := r.GetEvent().(type) {
	case *themisv1.ExploreResponse_Progress:
		p := ev.Progress
		if len(e.progress) < runproto.MaxPoints {
			e.progress = append(e.progress, p)
		}
		line := fmt.Sprintf("states %d  unique %d  depth %d  findings %d  %.1f states/s  restore %.1fs  %.0fs",
			p.GetStates(), p.GetUniqueStates(), p.GetDepth(), p.GetFindings(), p.GetStatesPerSec(), p.GetRestoreS(), p.GetElapsedS())
		elapsed := time.Duration(p.GetElapsedS() * float64(time.Second))
		if left := timeLeft(time.Duration(e.req.GetMaxSeconds())*time.Second, elapsed, p.GetStates(), e.req.GetMaxStates()); left != "" {
			line += "  " + left
		}
		e.st.Update(line)
	case *themisv1.ExploreResponse_Finding:
		update := e.found.add(ev.Finding)
		e.st.Clear()
		if !e.json {
			printStreamed(os.Stdout, ev.Finding, update)
		}
	case *themisv1.ExploreResponse_Summary:
		e.sum = ev.Summary
	}
	return nil
}

// runExplore streams one explore run and prints its summary.
func runExplore(ctx context.Context, g *globals, c *conn, req *themisv1.ExploreRequest, out exploreOutputs) error {
	stream, err := c.Explore(ctx, req)
	if err != nil {
		return err
	}
	run := &exploreRun{json: g.json, st: newStatusLine(), req: req}
	err = client.Drain(stream.Recv, run.event)
	run.st.Clear()
	if err != nil {
		return err
	}
	if run.sum == nil {
		return errors.New("explore: the daemon ended the stream without a summary")
	}
	if out.junit != "" {
		if err := writeJUnit(out.junit, req, run.sum, &run.found); err != nil {
			return err
		}
	}
	if out.report != "" {
		if err := writeRunReport(out.report, req, run, footprints(ctx, c, req, run, out.footprints)); err != nil {
			return err
		}
	}
	if g.json {
		err = writeProtoJSON(&themisv1.ExploreResult{Request: req, Summary: run.sum, FindingList: run.found.list()})
	} else {
		err = printExploreSummary(run.sum)
	}
	if err != nil {
		return err
	}
	if n := run.sum.GetFindings(); out.failOnFindings && n > 0 {
		return &exitError{code: exitFindings, err: fmt.Errorf("explore: %d finding(s) (--fail-on-findings)", n)}
	}
	return nil
}

// printJudged prints the run's canonicalization, its declared rules, the
// ops left out and what a declared difference judged.
func printJudged(w io.Writer, sum *themisv1.ExploreSummary) {
	if sum.GetPolicy() == "" {
		return
	}
	rules := strings.Split(sum.GetJudged(), "\n")
	fmt.Fprintf(w, "policy\t%s\n", rules[0])
	for _, r := range rules[1:] {
		fmt.Fprintf(w, "  declared\t%s\n", strings.TrimSpace(r))
	}
	if len(sum.GetOpsLeftOut()) > 0 {
		fmt.Fprintf(w, "ops left out\t%s (unsupported on a lane; --policy exact keeps them)\n", strings.Join(sum.GetOpsLeftOut(), ", "))
	}
	if sum.GetDeclaredOps() > 0 || sum.GetDeclaredStates() > 0 {
		fmt.Fprintf(w, "judged by a declared difference\t%d ops (errno), %d unique states (equal only canonicalized)\n", sum.GetDeclaredOps(), sum.GetDeclaredStates())
	}
}

// joinCounts writes counts by depth as "1 6 35 (depth 0..2)".
func joinCounts[T int | int64](by []T) string {
	parts := make([]string, len(by))
	for i, n := range by {
		parts[i] = fmt.Sprint(n)
	}
	return fmt.Sprintf("%s (depth 0..%d)", strings.Join(parts, " "), len(by)-1)
}

func printExploreSummary(sum *themisv1.ExploreSummary) error {
	w := newTable()
	fmt.Fprintf(w, "states\t%d\nunique states\t%d\nfindings\t%d\nstates/s\t%.1f\nbackend\t%s\nelapsed\t%.1f s\nmax depth\t%d\n",
		sum.GetStates(), sum.GetUniqueStates(), sum.GetFindings(), sum.GetStatesPerSec(), sum.GetBackend(), sum.GetElapsedS(), sum.GetMaxDepth())
	if by := sum.GetUniqueByDepth(); len(by) > 0 {
		fmt.Fprintf(w, "unique by depth\t%s\n", joinCounts(by))
	}
	if img := sum.GetImage(); img != nil {
		fmt.Fprintf(w, "image\t%s\n", imageLine(img))
	}
	fmt.Fprintf(w, "revert\t%s\n", sum.GetRevert())
	fmt.Fprintf(w, "workers\t%d (%s)\n", sum.GetWorkers(), sum.GetWorkersWhy())
	fmt.Fprintf(w, "time in ops / fingerprints / restores\t%.1f s / %.1f s / %.1f s\n", sum.GetOpS(), sum.GetFingerprintS(), sum.GetRestoreS())
	if n := sum.GetUnconfirmedHangs(); n > 0 {
		fmt.Fprintf(w, "hung tasks not confirmed\t%d (did not recur when replayed in a fresh guest: a loaded host, most likely; not findings)\n", n)
	}
	if sum.GetRestoresSkipped() > 0 {
		fmt.Fprintf(w, "restores skipped (lazy)\t%d\n", sum.GetRestoresSkipped())
	}
	if sum.GetStopped() != "" {
		fmt.Fprintf(w, "stopped early\t%s\n", sum.GetStopped())
	}
	printJudged(w, sum)
	if c := sum.GetCrash(); c != nil {
		fmt.Fprintf(w, "crash: persistence ops checked\t%d (%d repeats skipped, %d not logged whole; %d lanes where the op failed)\n", c.GetPoints(), c.GetRepeats(), c.GetUnlogged(), c.GetFailed())
		fmt.Fprintf(w, "crash: states checked\t%d in %.1f s (%.1f/s), %d not clean (%d of them dirty on a lane its fsck repairs after a crash: expected); durability checked %d, lost %d%s; %d crash findings\n",
			c.GetStates(), c.GetCheckS(), float64(c.GetStates())/max(c.GetCheckS(), 1e-9), c.GetNotClean(), c.GetRepaired(), c.GetDurable(), c.GetLost(), unnamedNote(c.GetUnnamed()), c.GetFindings())
	}
	for _, r := range sum.GetBelowRoots() {
		fmt.Fprintf(w, "root of %s from below\t%s\n", r.GetLane(), hex.EncodeToString(r.GetRoot()))
	}
	for _, l := range sum.GetLayers() {
		fmt.Fprintf(w, "%s: lower ⊕ upper checked\t%d states, %d with whiteouts, %d with opaque dirs\n", l.GetLane(), l.GetChecked(), l.GetWhiteouts(), l.GetOpaque())
	}
	fmt.Fprintf(w, "digest\t%s\nsession\t%s (ended; `themisctl events %s`)\n", sum.GetDigest(), sum.GetSessionId(), sum.GetSessionId())
	if len(sum.GetSessions()) > 1 {
		fmt.Fprintf(w, "worker sessions\t%s\n", strings.Join(sum.GetSessions()[1:], ", "))
	}
	return w.Flush()
}

// unnamedNote is the crash line's count of states that lost only a name
// their filesystem's fsync does not promise ("" none).
func unnamedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d more lost only a name the filesystem's fsync does not promise: expected)", n)
}
