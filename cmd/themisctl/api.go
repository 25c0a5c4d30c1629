package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/server"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// addAPI adds the daemon-backed commands.
func addAPI(root *cobra.Command, g *globals) {
	f := &connFlags{}
	f.register(root)
	// with runs fn with a connection, closing it (and an embedded daemon) after.
	with := func(cmd *cobra.Command, fn func(ctx context.Context, c *conn) error) error {
		ctx := cmd.Context()
		c, err := connect(ctx, g, f)
		if err != nil {
			return err
		}
		ferr := fn(ctx, c)
		if cerr := c.Close(); cerr != nil && ferr == nil {
			ferr = cerr
		}
		return ferr
	}
	out := func(m proto.Message, human func(w *tabwriter.Writer)) error {
		if g.json {
			return writeProtoJSON(m)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		human(w)
		return w.Flush()
	}

	sess := &cobra.Command{Use: "session", Short: "Create, list and remove sessions (a guest with one disk per lane)"}
	var create themisv1.CreateSessionRequest
	var lanes string
	createCmd := &cobra.Command{
		Use:   "create",
		Short: "Boot a guest with the given lanes and mount them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			create.Lanes = splitList(lanes)
			return with(cmd, func(ctx context.Context, c *conn) error {
				if c.embedded != nil {
					fmt.Fprintln(os.Stderr, "themisctl: no daemon is running: this session ends when the command exits (run `themisctl daemon` or themisd to keep sessions)")
				}
				progress("booting a guest with lanes " + strings.Join(create.Lanes, ", "))
				resp, err := c.CreateSession(ctx, &create)
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) { printSessions(w, resp.GetSession()) })
			})
		},
	}
	createCmd.Flags().StringVar(&lanes, "fs", "ext2", "lane specs, comma-separated (ext2, ext4, ext2:inode_size=256, vfat, ...)")
	createCmd.Flags().Int32Var(&create.MemoryMib, "memory", 128, "guest RAM in MiB")
	createCmd.Flags().StringVar(&create.RestoreMode, "restore-mode", "devices", "devices or full")
	createCmd.Flags().BoolVar(&create.Verify, "verify", false, "verify every restore against RAM and disk hashes")
	createCmd.Flags().StringVar(&create.Backend, "backend", "auto", "auto (kvm on hardware virtualization, else qemu), qemu or kvm")
	var listAll bool
	listCmd := &cobra.Command{
		Use: "list", Short: "List sessions", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{All: listAll})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) { printSessions(w, resp.GetSessions()...) })
			})
		},
	}
	listCmd.Flags().BoolVar(&listAll, "all", false, "include ended and failed sessions")
	rmCmd := &cobra.Command{
		Use: "rm SESSION...", Short: "Stop sessions (their records stay in the ledger)", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				for _, id := range args {
					if _, err := c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{SessionId: id}); err != nil {
						return err
					}
					if !g.json {
						fmt.Println("removed", id)
					}
				}
				return nil
			})
		},
	}
	sess.AddCommand(createCmd, listCmd, rmCmd)

	var forkName string
	var forkAuto bool
	forkCmd := &cobra.Command{
		Use: "fork SESSION", Short: "Checkpoint the whole machine (memory, devices, every disk)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &themisv1.ForkRequest{SessionId: args[0], Name: forkName, Origin: themisv1.Checkpoint_ORIGIN_MANUAL}
			if forkAuto {
				req.Origin = themisv1.Checkpoint_ORIGIN_AUTO
			}
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Fork(ctx, req)
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) { printCheckpoints(w, resp.GetCheckpoint()) })
			})
		},
	}
	forkCmd.Flags().StringVar(&forkName, "name", "", "checkpoint name")
	forkCmd.Flags().BoolVar(&forkAuto, "auto", false, "put it in the auto ring (oldest evicted) instead of the manual pool")

	restoreCmd := &cobra.Command{
		Use: "restore SESSION CHECKPOINT", Short: "Return the machine to a checkpoint on the current path", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: args[0], Checkpoint: args[1]})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "restored %s in %.1f ms\n", resp.GetCheckpoint().GetId(), float64(resp.GetDurationUs())/1e3)
				})
			})
		},
	}
	var cpAll bool
	cpCmd := &cobra.Command{
		Use: "checkpoints SESSION", Short: "List a session's checkpoints", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.ListCheckpoints(ctx, &themisv1.ListCheckpointsRequest{SessionId: args[0], All: cpAll})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) { printCheckpoints(w, resp.GetCheckpoints()...) })
			})
		},
	}
	cpCmd.Flags().BoolVar(&cpAll, "all", false, "include dropped checkpoints")

	var opJSON string
	applyCmd := &cobra.Command{
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
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: args[0], Op: op})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) {
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
				})
			})
		},
	}
	applyCmd.Flags().StringVar(&opJSON, "op", "", "the operation as protojson, e.g. '{\"mkdir\":{\"path\":\"d\",\"mode\":493}}'")

	var timeMode string
	var leaves bool
	fpCmd := &cobra.Command{
		Use: "fingerprint SESSION [LANE...]", Short: "Fingerprint lanes (Merkle root over path, kind, mode, owner, size, content, times)", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, ok := agentv1.TimeMode_value["TIME_MODE_"+strings.ToUpper(timeMode)]
			if !ok {
				return fmt.Errorf("--time %q: want none, mtime or all", timeMode)
			}
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: args[0], TimeMode: agentv1.TimeMode(mode), Leaves: leaves, Lanes: args[1:]})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) {
					for _, l := range resp.GetLanes() {
						fmt.Fprintf(w, "%s\t%s\t%d entries\n", l.GetLane(), hex.EncodeToString(l.GetRoot()), l.GetEntries())
						printLeaves(w, l.GetLeaves())
						if len(l.GetBelowRoot()) > 0 {
							fmt.Fprintf(w, "%s (from below)\t%s\t%d entries\n", l.GetLane(), hex.EncodeToString(l.GetBelowRoot()), l.GetBelowEntries())
							printLeaves(w, l.GetBelowLeaves())
						}
					}
				})
			})
		},
	}
	fpCmd.Flags().StringVar(&timeMode, "time", "none", "timestamps included: none (Metis parity), mtime, all")
	fpCmd.Long = "Fingerprint lanes. An overlay lane also shows its fingerprint from below: its upper layer, kernel whiteouts and opaque directories listed as WHITEOUT and OPAQUE markers."
	fpCmd.Flags().BoolVar(&leaves, "leaves", false, "list every entry, not only the roots")

	var follow bool
	statCmd := &cobra.Command{
		Use: "stat SESSION LANE PATH", Short: "stat a path inside a lane (lstat unless --follow)", Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Stat(ctx, &themisv1.StatRequest{SessionId: args[0], Lane: args[1], Path: lanePath(args[2]), Follow: follow})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) {
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
				})
			})
		},
	}
	statCmd.Flags().BoolVar(&follow, "follow", false, "follow a final symlink")

	restoreFileCmd := &cobra.Command{
		Use: "restore-file SESSION CHECKPOINT LANE PATH", Short: "Put one file back as it was at a checkpoint (or remove it if it did not exist)", Args: cobra.ExactArgs(4),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.RestoreFile(ctx, &themisv1.RestoreFileRequest{SessionId: args[0], Checkpoint: args[1], Lane: args[2], Path: args[3]})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) {
					if resp.GetRemoved() {
						fmt.Fprintf(w, "removed %s (absent at %s)\n", args[3], args[1])
					} else {
						fmt.Fprintf(w, "restored %s (from %s), %d bytes\n", args[3], args[1], resp.GetSize())
					}
				})
			})
		},
	}

	var after int64
	var limit int32
	eventsCmd := &cobra.Command{
		Use: "events SESSION", Short: "Show a session's ledger events", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.ListEvents(ctx, &themisv1.ListEventsRequest{SessionId: args[0], AfterSeq: after, Limit: limit})
				if err != nil {
					return err
				}
				return out(resp, func(w *tabwriter.Writer) {
					for _, e := range resp.GetEvents() {
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", e.GetSeq(), e.GetTime().AsTime().Format(time.RFC3339), e.GetKind(), e.GetDetail())
					}
				})
			})
		},
	}
	eventsCmd.Flags().Int64Var(&after, "after", 0, "only events after this sequence number")
	eventsCmd.Flags().Int32Var(&limit, "limit", 100, "at most this many events")

	var dcfg server.Config
	var configFile string
	daemonCmd := &cobra.Command{
		Use: "daemon", Short: "Run the daemon in the foreground (as themisd does)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := dcfg
			if configFile != "" {
				c, err := server.LoadConfig(configFile)
				if err != nil {
					return err
				}
				cfg = c
			}
			if cfg.CacheDir == "" {
				cfg.CacheDir = g.cacheDir
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			d, err := server.StartDaemon(ctx, cfg, g.log)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "themisctl daemon: listening on %s\n", d.Addr())
			select {
			case <-ctx.Done():
			case <-d.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			return d.Shutdown(sctx)
		},
	}
	daemonCmd.Flags().StringVar(&configFile, "config", "", "TOML config file (as themisd's)")
	daemonCmd.Flags().StringVar(&dcfg.Listen, "listen", "", "unix:///path (default: the standard socket) or tcp://host:port (needs TLS)")
	daemonCmd.Flags().StringVar(&dcfg.StateDir, "state-dir", "", "ledger directory")

	addExplore(root, g, with)
	addSweep(root, g, with)
	addBelowFS(root, g, with)
	root.AddCommand(newDiff(g, with), newReport(g, with))
	root.AddCommand(sess, forkCmd, restoreCmd, cpCmd, applyCmd, fpCmd, statCmd, restoreFileCmd, eventsCmd, daemonCmd)
}

// writeProtoJSON prints a message as JSON with the proto field names
// (snake_case), the same names the API documents.
func writeProtoJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	_, err = fmt.Println(string(b))
	return err
}

// writeProtoJSONLine prints a message as one line of JSON (JSON lines).
func writeProtoJSONLine(m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	_, err = fmt.Println(string(b))
	return err
}

// lanePath turns what a person types for a lane's root ("." or "/") into
// the API's "" and drops a leading "/".
func lanePath(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "." {
		return ""
	}
	return p
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func printSessions(w *tabwriter.Writer, ss ...*themisv1.Session) {
	fmt.Fprintf(w, "SESSION\tSTATE\tLANES\tBACKEND\tMEMORY\tDEPTH\tCREATED\tREASON\n")
	for _, s := range ss {
		var lanes []string
		for _, l := range s.GetLanes() {
			lanes = append(lanes, l.GetName())
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d MiB\t%d\t%s\t%s\n", s.GetId(), strings.ToLower(strings.TrimPrefix(s.GetState().String(), "STATE_")),
			strings.Join(lanes, ","), s.GetBackend(), s.GetMemoryMib(), s.GetDepth(), s.GetCreateTime().AsTime().Local().Format(time.DateTime), s.GetReason())
	}
}

func printCheckpoints(w *tabwriter.Writer, cs ...*themisv1.Checkpoint) {
	fmt.Fprintf(w, "CHECKPOINT\tSLOT\tORIGIN\tNAME\tPARENT\tLIVE\tCREATED\tFINGERPRINT\n")
	for _, c := range cs {
		var roots []string
		for _, r := range c.GetRoots() {
			h := hex.EncodeToString(r.GetRoot())
			if len(h) > 12 {
				h = h[:12]
			}
			roots = append(roots, r.GetLane()+"="+h)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%v\t%s\t%s\n", c.GetId(), c.GetSlot(), strings.ToLower(strings.TrimPrefix(c.GetOrigin().String(), "ORIGIN_")),
			c.GetName(), c.GetParentId(), c.GetLive(), c.GetCreateTime().AsTime().Local().Format(time.DateTime), strings.Join(roots, " "))
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
