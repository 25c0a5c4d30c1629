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
	"text/tabwriter"

	"github.com/spf13/cobra"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
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
	FindingList  []*findingJSONView `json:"finding_list"`
}

type findingJSONView struct {
	ID        string   `json:"id"`
	Kind      string   `json:"kind"`
	Detail    string   `json:"detail"`
	Trace     []string `json:"trace"`
	Path      string   `json:"path,omitempty"`
	Field     string   `json:"field,omitempty"`
	Minimized bool     `json:"minimized"`
}

func addExplore(root *cobra.Command, g *globals, with func(*cobra.Command, func(context.Context, *conn) error) error) {
	var req themisv1.ExploreRequest
	var lanes, timeMode string
	explore := &cobra.Command{
		Use:   "explore",
		Short: "Drive real filesystems through their state space (bounded DFS) and report where they misbehave",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Lanes = splitList(lanes)
			mode, ok := agentv1.TimeMode_value["TIME_MODE_"+strings.ToUpper(timeMode)]
			if !ok {
				return fmt.Errorf("--time-mode %q: want none, mtime or all", timeMode)
			}
			req.TimeMode = agentv1.TimeMode(mode)
			return with(cmd, func(ctx context.Context, c *conn) error {
				stream, err := c.Explore(ctx, &req)
				if err != nil {
					return err
				}
				tty := isTerminal(os.Stderr)
				var found []*themisv1.Finding
				var sum *themisv1.ExploreSummary
				for {
					r, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						if tty {
							fmt.Fprintln(os.Stderr)
						}
						return err
					}
					switch e := r.GetEvent().(type) {
					case *themisv1.ExploreResponse_Progress:
						p := e.Progress
						line := fmt.Sprintf("states %d  unique %d  depth %d  findings %d  %.1f states/s  restore %.1fs  %.0fs",
							p.GetStates(), p.GetUniqueStates(), p.GetDepth(), p.GetFindings(), p.GetStatesPerSec(), p.GetRestoreS(), p.GetElapsedS())
						if tty {
							fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
						} else {
							fmt.Fprintln(os.Stderr, line)
						}
					case *themisv1.ExploreResponse_Finding:
						found = append(found, e.Finding)
						if tty {
							fmt.Fprint(os.Stderr, "\r\033[K")
						}
						if !g.json {
							printFinding(os.Stdout, e.Finding)
						}
					case *themisv1.ExploreResponse_Summary:
						sum = e.Summary
					}
				}
				if tty {
					fmt.Fprintln(os.Stderr)
				}
				if sum == nil {
					return errors.New("explore: the daemon ended the stream without a summary")
				}
				if g.json {
					out := exploreJSON{
						SessionID: sum.GetSessionId(), States: sum.GetStates(), UniqueStates: sum.GetUniqueStates(), Findings: sum.GetFindings(),
						StatesPerSec: sum.GetStatesPerSec(), Backend: sum.GetBackend(), Stopped: sum.GetStopped(), ElapsedS: sum.GetElapsedS(),
						MaxDepth: sum.GetMaxDepth(), Digest: sum.GetDigest(), Roots: map[string]string{},
						OpS: sum.GetOpS(), FingerprintS: sum.GetFingerprintS(), RestoreS: sum.GetRestoreS(), Skipped: sum.GetRestoresSkipped(), FindingList: []*findingJSONView{},
					}
					for _, r := range sum.GetRoots() {
						out.Roots[r.GetLane()] = hex.EncodeToString(r.GetRoot())
					}
					for _, f := range found {
						out.FindingList = append(out.FindingList, &findingJSONView{ID: f.GetId(), Kind: f.GetKind(), Detail: f.GetDetail(), Trace: f.GetTrace(), Path: f.GetPath(), Field: f.GetField(), Minimized: f.GetMinimized()})
					}
					return writeJSON(os.Stdout, out)
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "states\t%d\nunique states\t%d\nfindings\t%d\nstates/s\t%.1f\nbackend\t%s\nelapsed\t%.1f s\nmax depth\t%d\n",
					sum.GetStates(), sum.GetUniqueStates(), sum.GetFindings(), sum.GetStatesPerSec(), sum.GetBackend(), sum.GetElapsedS(), sum.GetMaxDepth())
				fmt.Fprintf(w, "time in ops / fingerprints / restores\t%.1f s / %.1f s / %.1f s\n", sum.GetOpS(), sum.GetFingerprintS(), sum.GetRestoreS())
				if sum.GetRestoresSkipped() > 0 {
					fmt.Fprintf(w, "restores skipped (lazy)\t%d\n", sum.GetRestoresSkipped())
				}
				if sum.GetStopped() != "" {
					fmt.Fprintf(w, "stopped early\t%s\n", sum.GetStopped())
				}
				fmt.Fprintf(w, "digest\t%s\nsession\t%s (ended; `themisctl events %s`)\n", sum.GetDigest(), sum.GetSessionId(), sum.GetSessionId())
				return w.Flush()
			})
		},
	}
	fl := explore.Flags()
	fl.StringVar(&lanes, "fs", "ext2", "lane specs, comma-separated; two or more are compared with each other")
	fl.Int32Var(&req.Depth, "depth", 2, "operations from the root (1..10)")
	fl.Int32Var(&req.Branching, "branching", 12, "operations tried per state, drawn by the seeded policy")
	fl.Int64Var(&req.MaxStates, "max-states", 0, "budget of states (0: no limit)")
	fl.Int32Var(&req.MaxSeconds, "max-seconds", 0, "wall-clock budget (0: no limit)")
	fl.Uint64Var(&req.Seed, "seed", 1, "seed of the operation policy: the same seed gives the same run")
	fl.StringVar(&timeMode, "time-mode", "none", "timestamps in the abstract state: none (Metis parity), mtime, all")
	fl.StringVar(&req.Policy, "policy", "metis", "canonicalization policy: metis or exact")
	fl.BoolVar(&req.Fsck, "fsck", false, "single lane: e2fsck -fn the resolved image at every new state")
	fl.BoolVar(&req.Remount, "remount", false, "single lane: the state must survive umount+mount")
	fl.Int32Var(&req.MemoryMib, "memory", 128, "guest RAM in MiB")
	fl.BoolVar(&req.LazyRestore, "lazy-restore", false, "skip the restore after an op that failed on every lane and changed nothing (faster on TCG; hidden state may drift)")

	var sessionFilter string
	findings := &cobra.Command{
		Use: "findings", Short: "List stored findings", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.ListFindings(ctx, &themisv1.ListFindingsRequest{SessionId: sessionFilter})
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
	findings.Flags().StringVar(&sessionFilter, "session", "", "only this session's findings")

	replay := &cobra.Command{
		Use: "replay FINDING", Short: "Reproduce a finding: a fresh guest with its lanes, its trace, the per-lane results", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				fr, err := c.GetFinding(ctx, &themisv1.GetFindingRequest{FindingId: args[0]})
				if err != nil {
					return err
				}
				f := fr.GetFinding()
				progress(fmt.Sprintf("replaying %s (%s) on %s", f.GetId(), f.GetKind(), strings.Join(f.GetLaneSpecs(), ",")))
				cs, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: f.GetLaneSpecs()})
				if err != nil {
					return err
				}
				id := cs.GetSession().GetId()
				defer func() {
					if _, err := c.DeleteSession(context.WithoutCancel(ctx), &themisv1.DeleteSessionRequest{SessionId: id}); err != nil {
						fmt.Fprintln(os.Stderr, "themisctl: remove replay session:", err)
					}
				}()
				rep := replayResult{Finding: f.GetId(), Session: id, Kind: f.GetKind()}
				for _, s := range f.GetTrace() {
					op, err := opspec.Parse(s)
					if err != nil {
						return fmt.Errorf("finding %s: trace op %q: %w", f.GetId(), s, err)
					}
					resp, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: id, Op: op})
					if err != nil {
						return err
					}
					step := replayStep{Op: s, Diverged: resp.GetDiverged()}
					for _, r := range resp.GetResults() {
						step.Errnos = append(step.Errnos, fmt.Sprintf("%s=%d", r.GetLane(), r.GetErrno()))
					}
					rep.Steps = append(rep.Steps, step)
					rep.ErrnoDiverged = rep.ErrnoDiverged || step.Diverged
				}
				fp, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: id})
				if err != nil {
					return err
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
				if g.json {
					return writeJSON(os.Stdout, rep)
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
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
			})
		},
	}
	root.AddCommand(explore, findings, replay)
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

func printFinding(w io.Writer, f *themisv1.Finding) {
	fmt.Fprintf(w, "finding %s  %s  %s\n", f.GetId(), f.GetKind(), f.GetDetail())
	if f.GetPath() != "" || f.GetField() != "" {
		fmt.Fprintf(w, "  first difference: /%s %s\n", f.GetPath(), f.GetField())
	}
	for i, op := range f.GetTrace() {
		fmt.Fprintf(w, "  %d. %s\n", i+1, op)
	}
	fmt.Fprintf(w, "  reproduce: themisctl replay %s\n", f.GetId())
}
