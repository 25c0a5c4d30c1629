package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/opspec"
)

// isTerminal reports whether f is a terminal (progress redraws one line there).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// exploreJSON is the --json output of explore: the summary's fields at the
// top level, and the findings.
type exploreJSON struct {
	SessionID    string             `json:"session_id"`
	States       int64              `json:"states"`
	UniqueStates int64              `json:"unique_states"`
	Findings     int64              `json:"findings"`
	StatesPerSec float64            `json:"states_per_sec"`
	Backend      string             `json:"backend"`
	Stopped      string             `json:"stopped,omitempty"`
	ElapsedS     float64            `json:"elapsed_s"`
	MaxDepth     int32              `json:"max_depth"`
	Digest       string             `json:"digest"`
	Roots        map[string]string  `json:"roots"`
	OpS          float64            `json:"op_s"`
	FingerprintS float64            `json:"fingerprint_s"`
	RestoreS     float64            `json:"restore_s"`
	Skipped      int64              `json:"restores_skipped"`
	BelowRoots   map[string]string  `json:"below_roots,omitempty"`
	Layers       []layersJSON       `json:"layers,omitempty"`
	FindingList  []*findingJSONView `json:"finding_list"`
}

// layersJSON is what the lower ⊕ upper reference checked of one overlay
// lane.
type layersJSON struct {
	Lane      string `json:"lane"`
	Checked   int64  `json:"checked"`
	Whiteouts int64  `json:"whiteouts"`
	Opaque    int64  `json:"opaque"`
}

// findingJSONView is a finding in explore's --json output: its latest
// version (the minimized trace once the update came) with the trace as
// found beside it.
type findingJSONView struct {
	ID          string   `json:"id"`
	Kind        string   `json:"kind"`
	Detail      string   `json:"detail"`
	Trace       []string `json:"trace"`
	FoundTrace  []string `json:"found_trace"`
	Path        string   `json:"path,omitempty"`
	Field       string   `json:"field,omitempty"`
	Minimized   bool     `json:"minimized"`
	DuplicateOf string   `json:"duplicate_of,omitempty"`
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

func (l *findingLog) json() []*findingJSONView {
	out := []*findingJSONView{}
	for _, id := range l.order {
		f := l.byID[id]
		found := f.GetFoundTrace()
		if found == nil {
			found = f.GetTrace()
		}
		out = append(out, &findingJSONView{ID: f.GetId(), Kind: f.GetKind(), Detail: f.GetDetail(), Trace: f.GetTrace(), FoundTrace: found,
			Path: f.GetPath(), Field: f.GetField(), Minimized: f.GetMinimized(), DuplicateOf: f.GetDuplicateOf()})
	}
	return out
}

// newExplore is `themisctl explore`.
func newExplore(g *globals) *cobra.Command {
	var req themisv1.ExploreRequest
	var lanes, timeMode string
	cmd := &cobra.Command{
		Use:   "explore",
		Short: "Drive real filesystems through their state space (bounded DFS) and report where they misbehave",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Lanes = splitList(lanes)
			mode, err := parseTimeMode("--time-mode", timeMode)
			if err != nil {
				return err
			}
			req.TimeMode = mode
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				return runExplore(ctx, g, c, &req)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&lanes, "fs", "ext2", "lane specs, comma-separated (ext2, ext4, vfat, btrfs, overlay, ...; ext*:seed=1 and overlay:seed=1 start from a small tree, an overlay lane in its lower layer); two or more are compared with each other")
	fl.Int32Var(&req.Depth, "depth", 2, "operations from the root (1..10)")
	fl.Int32Var(&req.Branching, "branching", 12, "operations tried per state, drawn by the seeded policy")
	fl.Int64Var(&req.MaxStates, "max-states", 0, "budget of states (0: no limit)")
	fl.Int32Var(&req.MaxSeconds, "max-seconds", 0, "wall-clock budget (0: no limit)")
	fl.Uint64Var(&req.Seed, "seed", 1, "seed of the operation policy: the same seed gives the same run")
	fl.StringVar(&timeMode, "time-mode", "none", "timestamps in the abstract state: none (Metis parity), mtime, all")
	fl.StringVar(&req.Policy, "policy", "metis", "canonicalization policy: metis, exact, overlay (metis without the root's nlink, to compare an overlay lane with a plain one) or overlay-dirs (metis without any directory's nlink: an overlay lane over a seeded lower layer has merged directories, nlink 1)")
	fl.BoolVar(&req.Fsck, "fsck", false, "single lane: check the resolved image on the host at every new state (e2fsck -fn; btrfs check --readonly --check-data-csum)")
	fl.BoolVar(&req.Remount, "remount", false, "single lane: the state must survive umount+mount")
	fl.Int32Var(&req.MemoryMib, "memory", 128, "guest RAM in MiB")
	fl.StringVar(&req.Backend, "backend", "auto", "auto (kvm on hardware virtualization, else qemu), qemu or kvm")
	fl.BoolVar(&req.LazyRestore, "lazy-restore", false, "skip the restore after an op that failed on every lane and changed nothing (faster on TCG; hidden state may drift)")
	return cmd
}

// exploreRun is what an explore stream has shown so far: progress on
// stderr (one redrawn line on a terminal), findings on stdout as they come
// (unless --json), and the summary at the end.
type exploreRun struct {
	json, tty bool
	found     findingLog
	sum       *themisv1.ExploreSummary
}

func (e *exploreRun) event(r *themisv1.ExploreResponse) error {
	switch ev := r.GetEvent().(type) {
	case *themisv1.ExploreResponse_Progress:
		p := ev.Progress
		line := fmt.Sprintf("states %d  unique %d  depth %d  findings %d  %.1f states/s  restore %.1fs  %.0fs",
			p.GetStates(), p.GetUniqueStates(), p.GetDepth(), p.GetFindings(), p.GetStatesPerSec(), p.GetRestoreS(), p.GetElapsedS())
		if e.tty {
			fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(os.Stderr, line)
		}
	case *themisv1.ExploreResponse_Finding:
		update := e.found.add(ev.Finding)
		if e.tty {
			fmt.Fprint(os.Stderr, "\r\033[K")
		}
		if !e.json {
			printStreamed(os.Stdout, ev.Finding, update)
		}
	case *themisv1.ExploreResponse_Summary:
		e.sum = ev.Summary
	}
	return nil
}

// runExplore streams one explore run and prints its summary.
func runExplore(ctx context.Context, g *globals, c *conn, req *themisv1.ExploreRequest) error {
	stream, err := c.Explore(ctx, req)
	if err != nil {
		return err
	}
	run := &exploreRun{json: g.json, tty: isTerminal(os.Stderr)}
	err = client.Drain(stream.Recv, run.event)
	if run.tty {
		fmt.Fprintln(os.Stderr)
	}
	if err != nil {
		return err
	}
	if run.sum == nil {
		return errors.New("explore: the daemon ended the stream without a summary")
	}
	if g.json {
		return writeJSON(os.Stdout, exploreView(run.sum, &run.found))
	}
	return printExploreSummary(run.sum)
}

// exploreView is explore's --json output for a summary and the findings.
func exploreView(sum *themisv1.ExploreSummary, found *findingLog) exploreJSON {
	out := exploreJSON{
		SessionID: sum.GetSessionId(), States: sum.GetStates(), UniqueStates: sum.GetUniqueStates(), Findings: sum.GetFindings(),
		StatesPerSec: sum.GetStatesPerSec(), Backend: sum.GetBackend(), Stopped: sum.GetStopped(), ElapsedS: sum.GetElapsedS(),
		MaxDepth: sum.GetMaxDepth(), Digest: sum.GetDigest(), Roots: hexRoots(sum.GetRoots()),
		OpS: sum.GetOpS(), FingerprintS: sum.GetFingerprintS(), RestoreS: sum.GetRestoreS(), Skipped: sum.GetRestoresSkipped(),
		FindingList: found.json(),
	}
	if len(sum.GetBelowRoots()) > 0 {
		out.BelowRoots = hexRoots(sum.GetBelowRoots())
	}
	for _, l := range sum.GetLayers() {
		out.Layers = append(out.Layers, layersJSON{Lane: l.GetLane(), Checked: l.GetChecked(), Whiteouts: l.GetWhiteouts(), Opaque: l.GetOpaque()})
	}
	return out
}

// hexRoots maps each lane to its root in hex.
func hexRoots(roots []*themisv1.LaneRoot) map[string]string {
	out := map[string]string{}
	for _, r := range roots {
		out[r.GetLane()] = hex.EncodeToString(r.GetRoot())
	}
	return out
}

func printExploreSummary(sum *themisv1.ExploreSummary) error {
	w := newTable()
	fmt.Fprintf(w, "states\t%d\nunique states\t%d\nfindings\t%d\nstates/s\t%.1f\nbackend\t%s\nelapsed\t%.1f s\nmax depth\t%d\n",
		sum.GetStates(), sum.GetUniqueStates(), sum.GetFindings(), sum.GetStatesPerSec(), sum.GetBackend(), sum.GetElapsedS(), sum.GetMaxDepth())
	fmt.Fprintf(w, "time in ops / fingerprints / restores\t%.1f s / %.1f s / %.1f s\n", sum.GetOpS(), sum.GetFingerprintS(), sum.GetRestoreS())
	if sum.GetRestoresSkipped() > 0 {
		fmt.Fprintf(w, "restores skipped (lazy)\t%d\n", sum.GetRestoresSkipped())
	}
	if sum.GetStopped() != "" {
		fmt.Fprintf(w, "stopped early\t%s\n", sum.GetStopped())
	}
	for _, r := range sum.GetBelowRoots() {
		fmt.Fprintf(w, "root of %s from below\t%s\n", r.GetLane(), hex.EncodeToString(r.GetRoot()))
	}
	for _, l := range sum.GetLayers() {
		fmt.Fprintf(w, "%s: lower ⊕ upper checked\t%d states, %d with whiteouts, %d with opaque dirs\n", l.GetLane(), l.GetChecked(), l.GetWhiteouts(), l.GetOpaque())
	}
	fmt.Fprintf(w, "digest\t%s\nsession\t%s (ended; `themisctl events %s`)\n", sum.GetDigest(), sum.GetSessionId(), sum.GetSessionId())
	return w.Flush()
}

// newFindings is `themisctl findings`.
func newFindings(g *globals) *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use: "findings", Short: "List stored findings", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.ListFindings(ctx, &themisv1.ListFindingsRequest{SessionId: session})
				if err != nil {
					return err
				}
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
	return cmd
}

// newReplay is `themisctl replay`.
func newReplay(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "replay FINDING", Short: "Reproduce a finding: a fresh guest with its lanes, its trace, the per-lane results", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				fr, err := c.GetFinding(ctx, &themisv1.GetFindingRequest{FindingId: args[0]})
				if err != nil {
					return err
				}
				rep, err := replay(ctx, c, fr.GetFinding())
				if err != nil {
					return err
				}
				if g.json {
					return writeJSON(os.Stdout, rep)
				}
				return printReplay(rep)
			})
		},
	}
}

// replay runs a finding's trace on a fresh session with its lanes (removed
// after) and compares the lanes' errnos and final fingerprints.
func replay(ctx context.Context, c *conn, f *themisv1.Finding) (*replayResult, error) {
	progress(fmt.Sprintf("replaying %s (%s) on %s", f.GetId(), f.GetKind(), strings.Join(f.GetLaneSpecs(), ",")))
	cs, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: f.GetLaneSpecs()})
	if err != nil {
		return nil, err
	}
	id := cs.GetSession().GetId()
	defer func() {
		if _, err := c.DeleteSession(context.WithoutCancel(ctx), &themisv1.DeleteSessionRequest{SessionId: id}); err != nil {
			fmt.Fprintln(os.Stderr, "themisctl: remove replay session:", err)
		}
	}()
	rep := &replayResult{Finding: f.GetId(), Session: id, Kind: f.GetKind()}
	for _, s := range f.GetTrace() {
		step, err := replayStepOf(ctx, c, id, f, s)
		if err != nil {
			return nil, err
		}
		rep.Steps = append(rep.Steps, step)
		rep.ErrnoDiverged = rep.ErrnoDiverged || step.Diverged
	}
	fp, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: id})
	if err != nil {
		return nil, err
	}
	rep.Roots = map[string]string{}
	var first []byte
	for i, l := range fp.GetLanes() {
		rep.Roots[l.GetLane()] = hex.EncodeToString(l.GetRoot())
		if i == 0 {
			first = l.GetRoot()
		} else if !bytes.Equal(first, l.GetRoot()) {
			rep.StateDiverged = true
		}
	}
	rep.Reproduced = rep.ErrnoDiverged || rep.StateDiverged
	return rep, nil
}

// replayStepOf applies one op of f's trace on session id.
func replayStepOf(ctx context.Context, c *conn, id string, f *themisv1.Finding, s string) (replayStep, error) {
	op, err := opspec.Parse(s)
	if err != nil {
		return replayStep{}, fmt.Errorf("finding %s: trace op %q: %w", f.GetId(), s, err)
	}
	resp, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: id, Op: op})
	if err != nil {
		return replayStep{}, err
	}
	step := replayStep{Op: s, Diverged: resp.GetDiverged()}
	for _, r := range resp.GetResults() {
		step.Errnos = append(step.Errnos, fmt.Sprintf("%s=%d", r.GetLane(), r.GetErrno()))
	}
	return step, nil
}

func printReplay(rep *replayResult) error {
	w := newTable()
	for _, st := range rep.Steps {
		mark := ""
		if st.Diverged {
			mark = "  <- errno differs"
		}
		fmt.Fprintf(w, "%s\t%s%s\n", st.Op, strings.Join(st.Errnos, " "), mark)
	}
	for lane, r := range rep.Roots {
		fmt.Fprintf(w, "root %s\t%s\n", lane, r)
	}
	fmt.Fprintf(w, "reproduced\t%v\n", rep.Reproduced)
	return w.Flush()
}

type replayStep struct {
	Op       string   `json:"op"`
	Errnos   []string `json:"errnos"`
	Diverged bool     `json:"diverged"`
}

type replayResult struct {
	Finding       string            `json:"finding"`
	Session       string            `json:"session"`
	Kind          string            `json:"kind"`
	Steps         []replayStep      `json:"steps"`
	Roots         map[string]string `json:"roots"`
	ErrnoDiverged bool              `json:"errno_diverged"`
	StateDiverged bool              `json:"state_diverged"`
	Reproduced    bool              `json:"reproduced"`
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
	if d := f.GetDuplicateOf(); d != "" {
		fmt.Fprintf(w, "  duplicate of %s (same minimized trace)\n", d)
	}
	fmt.Fprintf(w, "  reproduce: themisctl replay %s\n", f.GetId())
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
		if !f.GetMinimized() {
			fmt.Fprintln(w, "  (minimized after the search)")
		}
		return
	}
	fmt.Fprintf(w, "finding %s  %s\n", f.GetId(), traceState(f))
	if !f.GetMinimized() {
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
