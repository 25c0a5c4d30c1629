package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/fsimage"
)

// newDiff is `themisctl diff`: two image files, or disks of sessions.
func newDiff(g *globals) *cobra.Command {
	var normalize bool
	var show int
	var sessionID, lane, sessionB, laneB string
	cmd := &cobra.Command{
		Use:   "diff A B | --session S --lane L FROM TO | --session S --lane L --session-b S2 [--lane-b L2] [FROM TO]",
		Short: "Byte diff of two disks: two image files, two checkpoints (or current) of a session's lane, or lanes of two sessions; ranges labelled by structure, --normalize masks nuisance fields",
		Long: `Byte diff of two disks, ranges labelled by structure (superblock, inode table, ...).

  themisctl diff A.img B.img                          two image files
  themisctl diff --session S --lane L FROM TO         one lane at two points of a session
                                                      (checkpoint ids or names, or current)
  themisctl diff --session S --lane L --session-b S2 [--lane-b L2] [FROM TO]
                                                      S's lane L at FROM against S2's lane L2
                                                      (default L) at TO; both default to current

--lane-b alone compares two lanes of one session. "current" is the block device
now, without what the guest still caches: apply a sync first. The two images
must have the same size. --normalize masks nuisance fields (superblock times,
s_uuid, s_hash_seed, inode times and extra fields, i_generation, checksums).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if sessionID != "" && (sessionB != "" || laneB != "") {
				if len(args) != 0 && len(args) != 2 {
					return fmt.Errorf("with --session-b or --lane-b: FROM TO (points of the two sides), or none for current current; got %d arguments", len(args))
				}
				return nil
			}
			if sessionB != "" || laneB != "" {
				return errors.New("--session-b and --lane-b need --session and --lane")
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if sessionID == "" {
				d, err := diffFiles(args[0], args[1], normalize)
				if err != nil {
					return err
				}
				return printDiff(g, diffResponseOf(d), normalize, show)
			}
			if lane == "" {
				return errors.New("--session needs --lane")
			}
			req := &themisv1.DiffRequest{SessionId: sessionID, Lane: lane, From: "current", To: "current", SessionB: sessionB, LaneB: laneB, Normalize: normalize}
			if len(args) == 2 {
				req.From, req.To = args[0], args[1]
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := c.Diff(ctx, req)
				if err != nil {
					return err
				}
				return printDiff(g, resp, normalize, show)
			})
		},
	}
	cmd.Flags().BoolVar(&normalize, "normalize", false, "mask nuisance fields: superblock times, s_uuid, s_hash_seed, inode times and extra fields, i_generation, checksums")
	cmd.Flags().IntVar(&show, "show", 20, "ranges to list")
	cmd.Flags().StringVar(&sessionID, "session", "", "compare disks of this session (checkpoint ids or names, or current) instead of files")
	cmd.Flags().StringVar(&lane, "lane", "", "the lane, with --session")
	cmd.Flags().StringVar(&sessionB, "session-b", "", "the session TO is in, to compare two sessions (default --session)")
	cmd.Flags().StringVar(&laneB, "lane-b", "", "the lane TO is in (default --lane)")
	return cmd
}

// diffFiles diffs two image files of the same size (fsimage.Diff).
func diffFiles(a, b string, normalize bool) (*fsimage.DiffResult, error) {
	var files [2]*os.File
	var sizes [2]int64
	for i, p := range []string{a, b} {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", p)
		}
		files[i], sizes[i] = f, fi.Size()
	}
	if sizes[0] != sizes[1] {
		return nil, fmt.Errorf("images differ in size: %s is %d bytes, %s is %d", a, sizes[0], b, sizes[1])
	}
	d, err := fsimage.Diff(files[0], files[1], sizes[0], normalize)
	if errors.Is(err, fsimage.ErrCorrupt) || errors.Is(err, fsimage.ErrUnsupported) {
		return nil, fmt.Errorf("%w (without --normalize the raw diff needs no parsing)", err)
	}
	return d, err
}

// diffResponseOf is a diff of two files as the daemon's Diff answers
// one: what printDiff shows and --json prints, whichever made it.
func diffResponseOf(d *fsimage.DiffResult) *themisv1.DiffResponse {
	resp := &themisv1.DiffResponse{RawSectors: int64(d.RawSectors), NormalizedSectors: int64(d.NormalizedSectors), Normalized: d.Normalized}
	for _, r := range d.Ranges {
		resp.Ranges = append(resp.Ranges, &themisv1.DiffRange{Offset: r.Offset, Len: int32(r.Len), Region: r.Region, Group: int32(r.Group), Field: r.Field})
	}
	for _, r := range d.Masked {
		resp.Masked = append(resp.Masked, &themisv1.DiffRange{Offset: r.Offset, Len: int32(r.Len), Region: r.Region, Group: int32(r.Group), Field: r.Field})
	}
	return resp
}

// printDiff prints a diff: with --json the DiffResponse, else a table of
// its first show ranges.
func printDiff(g *globals, d *themisv1.DiffResponse, normalize bool, show int) error {
	if g.json {
		return writeProtoJSON(d)
	}
	w := newTable()
	fmt.Fprintf(w, "raw sectors\t%d\n", d.GetRawSectors())
	if normalize {
		fmt.Fprintf(w, "normalized sectors\t%d\n", d.GetNormalizedSectors())
	}
	for i, r := range d.GetRanges() {
		if i == show {
			fmt.Fprintf(w, "... %d more ranges\n", len(d.GetRanges())-show)
			break
		}
		fmt.Fprintf(w, "differs\tLBA %d byte %d\t%d bytes\t%s (group %d)\n", r.GetOffset()/fsimage.SectorSize, r.GetOffset()%fsimage.SectorSize, r.GetLen(), r.GetRegion(), r.GetGroup())
	}
	for i, r := range d.GetMasked() {
		if i == show {
			fmt.Fprintf(w, "... %d more masked\n", len(d.GetMasked())-show)
			break
		}
		fmt.Fprintf(w, "masked\tLBA %d byte %d\t%d bytes\t%s\n", r.GetOffset()/fsimage.SectorSize, r.GetOffset()%fsimage.SectorSize, r.GetLen(), r.GetField())
	}
	return w.Flush()
}
