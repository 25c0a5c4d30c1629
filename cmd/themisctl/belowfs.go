package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

func lbaString(rs []*themisv1.LBARange, max int) string {
	var parts []string
	for i, r := range rs {
		if i == max {
			parts = append(parts, fmt.Sprintf("+%d more", len(rs)-max))
			break
		}
		if r.GetCount() == 1 {
			parts = append(parts, fmt.Sprintf("%d %s", r.GetFirst(), r.GetRegion()))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d %s", r.GetFirst(), r.GetFirst()+r.GetCount()-1, r.GetRegion()))
		}
	}
	return strings.Join(parts, ", ")
}

func addBelowFS(root *cobra.Command, g *globals, with func(*cobra.Command, func(context.Context, *conn) error) error) {
	var plan themisv1.ProfileRequest
	var lanes string
	profile := &cobra.Command{
		Use:   "profile",
		Short: "I/O profile of filesystem ops from beneath: sectors written (by structure), cold sectors read, amplification; the image layout in two views",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan.Lanes = splitList(lanes)
			return with(cmd, func(ctx context.Context, c *conn) error {
				progress("profiling on " + lanes)
				stream, err := c.Profile(ctx, &plan)
				if err != nil {
					return err
				}
				var rows []*themisv1.ProfileRow
				var sum *themisv1.ProfileSummary
				for {
					r, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						return err
					}
					if row := r.GetRow(); row != nil {
						rows = append(rows, row)
						if g.json {
							if err := writeProtoJSONLine(row); err != nil {
								return err
							}
						}
					}
					if s := r.GetSummary(); s != nil {
						sum = s
					}
				}
				if g.json {
					return nil
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "LANE\tOP\tBYTES\tSECTORS WRITTEN\tCOLD SECTORS READ\tAMPLIFICATION\tWRITTEN LBAS\n")
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%.1f\t%s\n", r.GetLane(), r.GetOp(), r.GetBytes(), r.GetSectorsWritten(), r.GetSectorsRead(), r.GetAmplification(), lbaString(r.GetWrittenLbas(), 4))
				}
				if sum != nil {
					for _, l := range sum.GetLayouts() {
						fmt.Fprintf(w, "\nlayout %s (parsed)\t%s\n", l.GetLane(), lbaString(l.GetParsed(), 12))
						fmt.Fprintf(w, "layout %s (from writes)\t%s\n", l.GetLane(), lbaString(l.GetInferred(), 12))
					}
				}
				return w.Flush()
			})
		},
	}
	pf := profile.Flags()
	pf.StringVar(&lanes, "fs", "ext2", "ext* lane specs, comma-separated")
	pf.StringArrayVar(&plan.Ops, "op", nil, "an op in the short form (repeatable; default the paper's Table 2 rows)")
	pf.StringArrayVar(&plan.Setup, "setup", nil, "an op run once before the checkpoint (repeatable; default: create f)")
	pf.Int32Var(&plan.MemoryMib, "memory", 128, "guest RAM in MiB")

	var creq themisv1.CorruptRequest
	var clanes string
	corrupt := &cobra.Command{
		Use:   "corrupt",
		Short: "Flip one bit found by parsing the live image, on a fork branch, and classify the blast radius",
		Long: `Flip one bit found by parsing the live image, on a fork branch: drop caches and
remount, observe (mount result, kernel log, paths that differ from the unflipped
counterfactual, read errors, e2fsck -fn), classify, restore.

Targets: superblock.magic, superblock.<field>, inode:<path>:i_size|i_mode|i_links_count,
dirent:<dir>:<name>:rec_len, data:<path>:<offset>:<bit>, gd.<field>, bitmap.block,
bitmap.inode, lba:<lba>:<offset>:<bit>. --sweep runs every class on every lane.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			creq.Lanes = splitList(clanes)
			return with(cmd, func(ctx context.Context, c *conn) error {
				progress("corrupting on " + clanes)
				stream, err := c.Corrupt(ctx, &creq)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				if !g.json {
					fmt.Fprintf(w, "LANE\tTARGET\tLBA:BYTE.BIT\tREGION/FIELD\tCLASS\tMOUNTED\tFSCK\tAFFECTED\n")
				}
				for {
					r, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						return err
					}
					if res := r.GetResult(); res != nil {
						if g.json {
							if err := writeProtoJSONLine(res); err != nil {
								return err
							}
							continue
						}
						fsck := "clean"
						if !res.GetFsckClean() {
							fsck = "errors"
						}
						fmt.Fprintf(w, "%s\t%s\t%d:%d.%d\t%s %s\t%s\t%v\t%s\t%s\n", res.GetLane(), res.GetTarget(), res.GetLba(), res.GetOffset(), res.GetBit(),
							res.GetRegion(), res.GetField(), res.GetClass(), res.GetMounted(), fsck, strings.Join(res.GetAffected(), " "))
					}
					if s := r.GetSummary(); s != nil && !g.json {
						fmt.Fprintf(w, "\nresults\t%d\tby class\t%v\n", s.GetResults(), s.GetByClass())
					}
				}
				return w.Flush()
			})
		},
	}
	cf := corrupt.Flags()
	cf.StringVar(&clanes, "fs", "ext2", "ext* lane specs, comma-separated")
	cf.StringArrayVar(&creq.Targets, "target", nil, "what to flip (repeatable; default the paper's Table 11 targets)")
	cf.StringArrayVar(&creq.Setup, "setup", nil, "an op run before (repeatable; default a small tree)")
	cf.BoolVar(&creq.Sweep, "sweep", false, "every target class on every lane (a Table 11-style table)")
	cf.Int32Var(&creq.MemoryMib, "memory", 128, "guest RAM in MiB")
	root.AddCommand(profile, corrupt)
}
