package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
)

// newApply is `themisctl apply`.
func newApply(g *globals) *cobra.Command {
	var opJSON string
	cmd := &cobra.Command{
		Use:   "apply SESSION [OP ...]",
		Short: "Run one filesystem operation on every lane",
		Long:  "Run one filesystem operation on every lane, given in the short form or with --op '<protojson>'.\n\nShort forms:\n" + opspec.Usage,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := strings.Join(args[1:], " ")
			if opJSON != "" {
				if spec != "" {
					return fmt.Errorf("give the operation either as words or with --op, not both")
				}
				spec = opJSON
			}
			op, err := opspec.Parse(spec)
			if err != nil {
				return err
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: args[0], Op: op})
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) { printApply(w, resp) })
			})
		},
	}
	cmd.Flags().StringVar(&opJSON, "op", "", "the operation as protojson, e.g. '{\"mkdir\":{\"path\":\"d\",\"mode\":493}}'")
	return cmd
}

func printApply(w io.Writer, resp *themisv1.ApplyResponse) {
	fmt.Fprintf(w, "LANE\tERRNO\tRESULT\n")
	for _, r := range resp.GetResults() {
		res := "ok"
		if r.GetErrno() != 0 || r.GetError() != "" {
			res = r.GetError()
		}
		fmt.Fprintf(w, "%s\t%d\t%s\n", r.GetLane(), r.GetErrno(), res)
	}
	if resp.GetDiverged() {
		fmt.Fprintf(w, "lanes DISAGREE on errno\n")
	}
}

// parseTimeMode reads a time mode flag (none, mtime or all).
func parseTimeMode(flag, s string) (agentv1.TimeMode, error) {
	mode, ok := agentv1.TimeMode_value["TIME_MODE_"+strings.ToUpper(s)]
	if !ok {
		return 0, fmt.Errorf("%s %q: want none, mtime or all", flag, s)
	}
	return agentv1.TimeMode(mode), nil
}

// newFingerprint is `themisctl fingerprint`.
func newFingerprint(g *globals) *cobra.Command {
	var timeMode string
	var leaves bool
	cmd := &cobra.Command{
		Use: "fingerprint SESSION [LANE...]", Short: "Fingerprint lanes (Merkle root over path, kind, mode, owner, size, content, times)", Args: cobra.MinimumNArgs(1),
		Long: "Fingerprint lanes. An overlay lane also shows its fingerprint from below: its upper layer, kernel whiteouts and opaque directories listed as WHITEOUT and OPAQUE markers.",
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := parseTimeMode("--time", timeMode)
			if err != nil {
				return err
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: args[0], TimeMode: mode, Leaves: leaves, Lanes: args[1:]})
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) { printFingerprints(w, resp) })
			})
		},
	}
	cmd.Flags().StringVar(&timeMode, "time", "none", "timestamps included: none (Metis parity), mtime, all")
	cmd.Flags().BoolVar(&leaves, "leaves", false, "list every entry, not only the roots")
	return cmd
}

func printFingerprints(w io.Writer, resp *themisv1.FingerprintResponse) {
	for _, l := range resp.GetLanes() {
		fmt.Fprintf(w, "%s\t%s\t%d entries\n", l.GetLane(), hex.EncodeToString(l.GetRoot()), l.GetEntries())
		printLeaves(w, l.GetLeaves())
		if len(l.GetBelowRoot()) > 0 {
			fmt.Fprintf(w, "%s (from below)\t%s\t%d entries\n", l.GetLane(), hex.EncodeToString(l.GetBelowRoot()), l.GetBelowEntries())
			printLeaves(w, l.GetBelowLeaves())
		}
	}
}

// printLeaves lists fingerprint entries, one a line; an overlay marker from
// below (a symbolic entry) as WHITEOUT or OPAQUE of its target.
func printLeaves(w io.Writer, leaves []*agentv1.Entry) {
	for _, e := range leaves {
		if c := oracle.ParseSymbolic(e); c.Marker != oracle.MarkerNone {
			fmt.Fprintf(w, "  /%s\t%s\n", c.Target, strings.ToUpper(c.Marker.String()))
			continue
		}
		fmt.Fprintf(w, "  /%s\t%s\t%04o %d:%d n%d %d bytes\n", e.GetPath(), strings.TrimPrefix(e.GetKind().String(), "KIND_"), e.GetMode(), e.GetUid(), e.GetGid(), e.GetNlink(), e.GetSize())
	}
}

// newStat is `themisctl stat`.
func newStat(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use: "stat SESSION LANE PATH", Short: "stat a path inside a lane (lstat unless --follow)", Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Stat(ctx, &themisv1.StatRequest{SessionId: args[0], Lane: args[1], Path: lanePath(args[2]), Follow: follow})
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) { printStat(w, resp) })
			})
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "follow a final symlink")
	return cmd
}

func printStat(w io.Writer, resp *themisv1.StatResponse) {
	if resp.GetErrno() != 0 {
		fmt.Fprintf(w, "errno %d: %s\n", resp.GetErrno(), resp.GetError())
		return
	}
	s := resp.GetStat()
	fmt.Fprintf(w, "kind\t%s\nmode\t%04o\nuid:gid\t%d:%d\nnlink\t%d\nsize\t%d\nino\t%d\n", strings.TrimPrefix(s.GetKind().String(), "KIND_"), s.GetMode(), s.GetUid(), s.GetGid(), s.GetNlink(), s.GetSize(), s.GetIno())
	for _, t := range []struct {
		n  string
		ts *agentv1.Timespec
	}{{"atime", s.GetAtime()}, {"mtime", s.GetMtime()}, {"ctime", s.GetCtime()}} {
		fmt.Fprintf(w, "%s\t%d.%09d\t%s\n", t.n, t.ts.GetSec(), t.ts.GetNsec(), time.Unix(t.ts.GetSec(), t.ts.GetNsec()).UTC().Format(time.RFC3339Nano))
	}
}
