package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// newFork is `themisctl fork`.
func newFork(g *globals) *cobra.Command {
	var name string
	var auto bool
	cmd := &cobra.Command{
		Use: "fork SESSION", Short: "Checkpoint the whole machine (memory, devices, every disk)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &themisv1.ForkRequest{SessionId: args[0], Name: name, Origin: themisv1.Checkpoint_ORIGIN_MANUAL}
			if auto {
				req.Origin = themisv1.Checkpoint_ORIGIN_AUTO
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Fork(ctx, req)
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) { printCheckpoints(w, resp.GetCheckpoint()) })
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "checkpoint name")
	cmd.Flags().BoolVar(&auto, "auto", false, "put it in the auto ring (oldest evicted) instead of the manual pool")
	return cmd
}

// newRestore is `themisctl restore`.
func newRestore(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "restore SESSION CHECKPOINT", Short: "Return the machine to a checkpoint on the current path", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: args[0], Checkpoint: args[1]})
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "restored %s in %.1f ms\n", resp.GetCheckpoint().GetId(), float64(resp.GetDurationUs())/1e3)
				})
			})
		},
	}
}

// newCheckpoints is `themisctl checkpoints`.
func newCheckpoints(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use: "checkpoints SESSION", Short: "List a session's checkpoints", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.ListCheckpoints(ctx, &themisv1.ListCheckpointsRequest{SessionId: args[0], All: all})
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) { printCheckpoints(w, resp.GetCheckpoints()...) })
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include dropped checkpoints")
	return cmd
}

// newRestoreFile is `themisctl restore-file`.
func newRestoreFile(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "restore-file SESSION CHECKPOINT LANE PATH", Short: "Put one file back as it was at a checkpoint (or remove it if it did not exist)", Args: cobra.ExactArgs(4),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.RestoreFile(ctx, &themisv1.RestoreFileRequest{SessionId: args[0], Checkpoint: args[1], Lane: args[2], Path: args[3]})
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) {
					if resp.GetRemoved() {
						fmt.Fprintf(w, "removed %s (absent at %s)\n", args[3], args[1])
					} else {
						fmt.Fprintf(w, "restored %s (from %s), %d bytes\n", args[3], args[1], resp.GetSize())
					}
				})
			})
		},
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
