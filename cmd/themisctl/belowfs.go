package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/opspec"
)

func lbaString(rs []*themisv1.LBARange, max int) string {
	var parts []string
	for i, r := range rs {
		if i == max {
			parts = append(parts, fmt.Sprintf("+%d more", len(rs)-max))
			break
		}
		what := r.GetRegion()
		if r.GetPath() != "" {
			what += " " + r.GetPath()
		}
		if r.GetCount() == 1 {
			parts = append(parts, fmt.Sprintf("%d %s", r.GetFirst(), what))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d %s", r.GetFirst(), r.GetFirst()+r.GetCount()-1, what))
		}
	}
	return strings.Join(parts, ", ")
}

// newProfile is `themisctl profile`.
func newProfile(g *globals) *cobra.Command {
	var plan themisv1.ProfileRequest
	var lanes string
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "I/O profile of filesystem ops from beneath: sectors written (by structure), cold sectors read, amplification; the image layout in two views",
		Long: `I/O profile of filesystem ops from beneath. Each op runs alone from a
checkpoint taken after the setup: sectors written (labelled by structure),
then the cold sectors a stat/read of its path costs after a remount, minus
the mount baseline. Besides ops, the read-side commands of Table 4:

` + opspec.WalkUsage + `

run alone after a cold remount; their row is the sectors the walk read
beyond the mount, and which structures they lie in.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan.Lanes = splitList(lanes)
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				progress("profiling on " + lanes)
				return runProfile(ctx, g, c, &plan)
			})
		},
	}
	pf := cmd.Flags()
	pf.StringVar(&lanes, "fs", "ext2", "ext* lane specs, comma-separated")
	pf.StringArrayVar(&plan.Ops, "op", nil, `an op in the short form, or "ls [DIR]" / "find [DIR]" (lane-relative; "/" is the lane root) (repeatable; default the paper's Table 2 rows, then ls dir, find tree and find / for Table 4)`)
	pf.StringArrayVar(&plan.Setup, "setup", nil, "an op run once before the checkpoint (repeatable; default: create f, then directory dir of --ls-files files and the nested tree of --tree-entries entries)")
	pf.Int32Var(&plan.LsFiles, "ls-files", 0, fmt.Sprintf("files in the default setup's directory dir (default %d)", api.DefaultLsFiles))
	pf.Int32Var(&plan.TreeEntries, "tree-entries", 0, fmt.Sprintf("entries in the default setup's nested tree (default %d)", api.DefaultTreeEntries))
	pf.Int32Var(&plan.MemoryMib, "memory", 128, "guest RAM in MiB")
	addImageFlag(pf, &plan.Image)
	return cmd
}

// runProfile streams a profile: with --json a JSON line per row as it
// comes, else the table and the layouts at the end.
func runProfile(ctx context.Context, g *globals, c *conn, plan *themisv1.ProfileRequest) error {
	stream, err := c.Profile(ctx, plan)
	if err != nil {
		return err
	}
	var rows []*themisv1.ProfileRow
	var sum *themisv1.ProfileSummary
	err = client.Drain(stream.Recv, func(r *themisv1.ProfileResponse) error {
		if s := r.GetSummary(); s != nil {
			sum = s
		}
		row := r.GetRow()
		if row == nil {
			return nil
		}
		rows = append(rows, row)
		if g.json {
			return writeProtoJSONLine(row)
		}
		return nil
	})
	if err != nil || g.json {
		return err
	}
	return printProfile(rows, sum)
}

func printProfile(rows []*themisv1.ProfileRow, sum *themisv1.ProfileSummary) error {
	w := newTable()
	fmt.Fprintf(w, "LANE\tOP\tBYTES\tSECTORS WRITTEN\tCOLD SECTORS READ\tAMPLIFICATION\tWRITTEN LBAS\tREAD LBAS (beyond the mount)\n")
	for _, r := range rows {
		op := r.GetOp()
		if r.GetErrno() != 0 {
			op += fmt.Sprintf(" (errno %d)", r.GetErrno())
		} else if r.GetEntries() > 0 {
			op += fmt.Sprintf(" (%d entries)", r.GetEntries())
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%.1f\t%s\t%s\n", r.GetLane(), op, r.GetBytes(), r.GetSectorsWritten(), r.GetSectorsRead(), r.GetAmplification(),
			lbaString(r.GetWrittenLbas(), 4), lbaString(r.GetReadLbas(), 8))
	}
	for _, l := range sum.GetLayouts() {
		fmt.Fprintf(w, "\nlayout %s (parsed)\t%s\n", l.GetLane(), lbaString(l.GetParsed(), 12))
		fmt.Fprintf(w, "layout %s (from writes)\t%s\n", l.GetLane(), lbaString(l.GetInferred(), 12))
	}
	return w.Flush()
}

// newCorrupt is `themisctl corrupt`.
func newCorrupt(g *globals) *cobra.Command {
	var req themisv1.CorruptRequest
	var lanes string
	cmd := &cobra.Command{
		Use:   "corrupt",
		Short: "Flip one bit found by parsing the live image, on a fork branch, and classify the blast radius",
		Long: `Flip one bit found by parsing the live image, on a fork branch: drop caches and
remount, observe (mount result, kernel log, paths that differ from the unflipped
counterfactual, read errors, the host fsck: e2fsck -fn, btrfs check --readonly
--check-data-csum), classify, restore. A flip whose mount (or the reads after it)
crashes the guest's kernel is class kernel-crash, with the kernel's report (--json:
kernel), and the run goes on in a fresh session.

Targets: superblock.magic, superblock.<field>, inode:<path>:i_size|i_mode|i_links_count,
dirent:<dir>:<name>:rec_len, data:<path>:<offset>:<bit>, gd.<field>, bitmap.block,
bitmap.inode, lba:<lba>:<offset>:<bit>. btrfs lanes take data: and lba: only.
--sweep runs every class on every lane (n/a where a lane's filesystem lacks the
structure) and, with several lanes, ends with the classes side by side.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Lanes = splitList(lanes)
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				progress("corrupting on " + lanes)
				return runCorrupt(ctx, g, c, &req)
			})
		},
	}
	cf := cmd.Flags()
	cf.StringVar(&lanes, "fs", "ext2", "ext2/3/4 or btrfs lane specs, comma-separated")
	cf.StringArrayVar(&req.Targets, "target", nil, "what to flip (repeatable; default the paper's Table 11 targets)")
	cf.StringArrayVar(&req.Setup, "setup", nil, "an op run before (repeatable; default a small tree)")
	cf.BoolVar(&req.Sweep, "sweep", false, "every target class on every lane (a Table 11-style table)")
	cf.Int32Var(&req.MemoryMib, "memory", 128, "guest RAM in MiB")
	addImageFlag(cf, &req.Image)
	return cmd
}

// runCorrupt streams a corruption run: with --json a JSON line per result,
// else a row per result as it comes, the summary, and with several lanes
// the blast-radius table.
func runCorrupt(ctx context.Context, g *globals, c *conn, req *themisv1.CorruptRequest) error {
	stream, err := c.Corrupt(ctx, req)
	if err != nil {
		return err
	}
	w := newTable()
	if !g.json {
		fmt.Fprint(w, corruptHeader)
	}
	var results []*themisv1.CorruptResult
	err = client.Drain(stream.Recv, func(r *themisv1.CorruptResponse) error {
		if res := r.GetResult(); res != nil {
			if g.json {
				return writeProtoJSONLine(res)
			}
			results = append(results, res)
			writeCorruptRow(w, res)
		}
		if s := r.GetSummary(); s != nil && !g.json {
			fmt.Fprintf(w, "\nresults\t%d\tby class\t%v\n", s.GetResults(), s.GetByClass())
			if s.GetDeaths() > 0 {
				fmt.Fprintf(w, "guests lost\t%d\t(sessions %s: each flip that lost one went on in a fresh one)\n", s.GetDeaths(), strings.Join(s.GetSessions(), ", "))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil || g.json || len(req.Lanes) < 2 {
		return err
	}
	w = newTable()
	writeBlastTable(w, results)
	return w.Flush()
}
