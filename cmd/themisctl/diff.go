package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/fsimage"
)

func newDiff(g *globals) *cobra.Command {
	var normalize bool
	var show int
	cmd := &cobra.Command{
		Use:   "diff IMAGE_A IMAGE_B",
		Short: "Byte diff of two disk images: differing sectors and byte ranges labelled by structure; --normalize masks nuisance fields (ext2/3/4)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var files [2]*os.File
			var sizes [2]int64
			for i, p := range args {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				if !fi.Mode().IsRegular() {
					return fmt.Errorf("%s: not a regular file", p)
				}
				files[i], sizes[i] = f, fi.Size()
			}
			if sizes[0] != sizes[1] {
				return fmt.Errorf("images differ in size: %s is %d bytes, %s is %d", args[0], sizes[0], args[1], sizes[1])
			}
			d, err := fsimage.Diff(files[0], files[1], sizes[0], normalize)
			if err != nil {
				if errors.Is(err, fsimage.ErrCorrupt) || errors.Is(err, fsimage.ErrUnsupported) {
					return fmt.Errorf("%w (without --normalize the raw diff needs no parsing)", err)
				}
				return err
			}
			if g.json {
				return writeJSON(os.Stdout, d)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "raw sectors\t%d\n", d.RawSectors)
			if normalize {
				fmt.Fprintf(w, "normalized sectors\t%d\n", d.NormalizedSectors)
			}
			for i, r := range d.Ranges {
				if i == show {
					fmt.Fprintf(w, "... %d more ranges\n", len(d.Ranges)-show)
					break
				}
				fmt.Fprintf(w, "differs\tLBA %d byte %d\t%d bytes\t%s (group %d)\n", r.Offset/fsimage.SectorSize, r.Offset%fsimage.SectorSize, r.Len, r.Region, r.Group)
			}
			for i, r := range d.Masked {
				if i == show {
					fmt.Fprintf(w, "... %d more masked\n", len(d.Masked)-show)
					break
				}
				fmt.Fprintf(w, "masked\tLBA %d byte %d\t%d bytes\t%s\n", r.Offset/fsimage.SectorSize, r.Offset%fsimage.SectorSize, r.Len, r.Field)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&normalize, "normalize", false, "mask nuisance fields: superblock times, s_uuid, s_hash_seed, inode times and extra fields, i_generation, checksums")
	cmd.Flags().IntVar(&show, "show", 20, "ranges to list")
	return cmd
}
