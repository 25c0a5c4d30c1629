package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// newSession is `themisctl session`: create, list and rm.
func newSession(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "session", Short: "Create, list and remove sessions (a guest with one disk per lane)"}
	cmd.AddCommand(newSessionCreate(g), newSessionList(g), newSessionRm(g))
	return cmd
}

func newSessionCreate(g *globals) *cobra.Command {
	var create themisv1.CreateSessionRequest
	var lanes string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Boot a guest with the given lanes and mount them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			create.Lanes = splitList(lanes)
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				if c.embedded != nil {
					fmt.Fprintln(os.Stderr, "themisctl: no daemon is running: this session ends when the command exits (run `themisctl daemon` or themisd to keep sessions)")
				}
				progress("booting a guest with lanes " + strings.Join(create.Lanes, ", "))
				resp, err := c.CreateSession(ctx, &create)
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) { printSessions(w, resp.GetSession()) })
			})
		},
	}
	cmd.Flags().StringVar(&lanes, "fs", "ext2", "lane specs, comma-separated (ext2, ext4, ext2:inode_size=256, vfat, ...)")
	cmd.Flags().Int32Var(&create.MemoryMib, "memory", 128, "guest RAM in MiB")
	addImageFlag(cmd.Flags(), &create.Image)
	cmd.Flags().StringVar(&create.RestoreMode, "restore-mode", "devices", "devices or full")
	cmd.Flags().BoolVar(&create.Verify, "verify", false, "verify every restore against RAM and disk hashes")
	cmd.Flags().StringVar(&create.Backend, "backend", "auto", "auto (kvm on hardware virtualization, else qemu), qemu or kvm")
	return cmd
}

func newSessionList(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use: "list", Short: "List sessions", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp := &themisv1.ListSessionsResponse{}
				req := &themisv1.ListSessionsRequest{All: all, PageSize: api.MaxPageSize}
				for {
					page, err := c.ListSessions(ctx, req)
					if err != nil {
						return err
					}
					resp.Sessions = append(resp.Sessions, page.GetSessions()...)
					if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
						break
					}
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) { printSessions(w, resp.GetSessions()...) })
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include ended and failed sessions")
	return cmd
}

func newSessionRm(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "rm SESSION...", Short: "Stop sessions (their records stay in the ledger)", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
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
