package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/bench"
)

// newBenchRestore is `themisctl bench restore`: restore time against
// dirtied pages and RAM size on the KVM backend, beside the QEMU backend's
// restore and the in-OS remount baseline (bench.Restore). It runs
// in-process: no daemon.
func newBenchRestore(g *globals) *cobra.Command {
	var o bench.RestoreOptions
	var rams []string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore time against dirtied pages and RAM size (KVM, synthetic guests) beside the QEMU backend's restore and the in-OS remount baseline",
		Long: `Restore time against dirtied pages and RAM size, side by side in one run.

KVM: for each RAM size and page count, a synthetic guest on /dev/kvm that
dirties that many pages; checkpoint once (the arm), then --iterations rounds
of run → restore: median and p90, split into harvest, copy and state. A
least-squares line over the page counts at the smallest RAM size gives the
per-page and fixed cost, compared with the target (≤ 0.5 µs per page plus
≤ 100 µs, flat in RAM size). A missed target is reported, not an error.

QEMU (--qemu): a real guest (128 MiB, one ext2 lane), devices-only restores
after a 4 KiB write. Skipped without QEMU or a guest image.

Baseline (--baseline): the Metis-style in-OS remount, per state: copy the
image in, loop-mount, one op, unmount, copy it out. Skipped where the host
cannot loop-mount (needs root).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.RAM = nil
			for _, s := range rams {
				n, err := bench.ParseSize(s)
				if err != nil {
					return fmt.Errorf("--ram: %w", err)
				}
				o.RAM = append(o.RAM, n)
			}
			if o.Iterations < 1 {
				return fmt.Errorf("--iterations %d: want at least 1", o.Iterations)
			}
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			o.CacheDir, o.Log, o.Progress = cache, g.log, progress
			r, err := bench.Restore(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.json {
				return writeJSON(os.Stdout, r)
			}
			fmt.Print(r.String())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&rams, "ram", []string{"256M", "2G"}, "guest RAM sizes of the synthetic guests (K, M, G suffixes)")
	f.IntSliceVar(&o.Pages, "pages", bench.DefaultRestorePages, "pages the guest dirties between checkpoint and restore")
	f.IntVar(&o.Iterations, "iterations", bench.DefaultRestoreIterations, "restores per point (and QEMU and baseline samples)")
	f.BoolVar(&o.DirtyRing, "dirty-ring", false, "track dirty pages with the dirty ring instead of the bitmap")
	f.BoolVar(&o.QEMU, "qemu", true, "also measure the QEMU backend's restore (boots a guest)")
	f.BoolVar(&o.Baseline, "baseline", true, "also measure the in-OS remount baseline (needs root and loop devices)")
	return cmd
}
