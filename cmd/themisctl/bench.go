package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/bench"
	"github.com/themisfs/themis/vmm"
)

// newBench is `themisctl bench`: Themis against baselines.
func newBench(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure Themis against baselines, side by side in one run"}
	cmd.AddCommand(newBenchExplore(g), newBenchRestore(g), newBenchChannel(g), newBenchEcho(g), newBenchBugs(g))
	return cmd
}

// newBenchExplore is `themisctl bench explore`: explore beside the in-OS
// remount baseline (bench.Run). It runs in-process: no daemon.
func newBenchExplore(g *globals) *cobra.Command {
	var o bench.Options
	var lanes, reverts, channels, workers string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "explore",
		Short: "States/s and the per-state split of an explore run beside the Metis-style in-OS remount baseline (same fs, same image)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			o.Explore.Lanes, o.Explore.Seed, o.Reverts = splitList(lanes), seed, splitList(reverts)
			for _, ch := range splitList(channels) {
				o.Channels = append(o.Channels, vmm.AgentChannel(ch))
			}
			for _, w := range splitList(workers) {
				n, err := strconv.Atoi(w)
				if err != nil || n < 1 || n > api.MaxWorkers {
					return fmt.Errorf("--workers: %q: want a list of counts from 1 to %d", w, api.MaxWorkers)
				}
				o.Workers = append(o.Workers, n)
			}
			o.Baseline.CacheDir = cache
			progress("baseline (loop-mount, one op, unmount, copy back) and explore per agent channel and revert strategy, side by side")
			cmp, err := bench.RunInProcess(cmd.Context(), cache, g.log, o)
			if err != nil {
				return err
			}
			return printReport(g, cmp, cmp.Proto())
		},
	}
	f := cmd.Flags()
	f.StringVar(&lanes, "fs", "ext2", "lane spec (the baseline uses the first)")
	f.IntVar(&o.Explore.Depth, "depth", 2, "explore depth")
	f.IntVar(&o.Explore.Branching, "branching", 12, "explore branching")
	f.IntVar(&o.Explore.MaxStates, "max-states", 200, "explore state budget")
	f.Uint64Var(&seed, "seed", 1, "explore seed")
	f.IntVar(&o.Baseline.States, "baseline-states", 100, "baseline states")
	f.StringVar(&reverts, "revert", "machine,remount", "revert strategies to measure, one explore run each per channel, side by side")
	f.StringVar(&channels, "channel", "virtio,uart", "agent channels to measure (virtio: virtio-serial on QEMU; uart: the 16550)")
	f.StringVar(&workers, "workers", "1", "worker counts to measure, one explore run each per channel and revert (e.g. 1,2)")
	return cmd
}

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
			return printReport(g, r, r.Proto())
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

// newBenchChannel is `themisctl bench channel`: the agent channel on the
// UART beside the virtio-serial port, on two QEMU guests in one run
// (bench.Channel). It runs in-process: no daemon.
func newBenchChannel(g *globals) *cobra.Command {
	var o bench.ChannelOptions
	cmd := &cobra.Command{
		Use:   "channel",
		Short: "Agent call round trips on the UART beside the virtio-serial port (QEMU, real guest), after boot and after a restore",
		Long: `Agent call round trips on the UART beside the virtio-serial port, side by side in one run.

Two QEMU guests from the same image (128 MiB, one ext2 lane holding --files
files of 512 bytes, checkpointed), the agent on the UART (/dev/ttyS1) in one
and on the virtio port themis.agent in the other. Each op — a Ping, a write
carrying 1 KiB, one carrying 16 KiB, a fingerprint with every leaf — is timed
--iterations times per phase on each guest, the guests taking turns call by
call: one call after another on the booted guest ("boot"), then the first
call after a restore to the checkpoint ("restore"; the restores are timed
too). Medians, p90 and the UART / virtio ratio. Skipped without QEMU or a
guest image.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Iterations < 1 {
				return fmt.Errorf("--iterations %d: want at least 1", o.Iterations)
			}
			if o.Files < 1 {
				return fmt.Errorf("--files %d: want at least 1", o.Files)
			}
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			o.CacheDir, o.Log, o.Progress = cache, g.log, progress
			r, err := bench.Channel(cmd.Context(), o)
			if err != nil {
				return err
			}
			return printReport(g, r, r.Proto())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Iterations, "iterations", bench.DefaultChannelIterations, "calls per op, phase and channel")
	f.IntVar(&o.Files, "files", bench.DefaultChannelFiles, "files in the fingerprinted lane")
	return cmd
}

// newBenchEcho is `themisctl bench echo`: the agent channel's exits
// and time per message, UART beside virtio console on /dev/kvm with synthetic echo guests (bench.Echo). It
// runs in-process: no daemon.
func newBenchEcho(g *globals) *cobra.Command {
	var o bench.EchoOptions
	var sizes []string
	cmd := &cobra.Command{
		Use:   "echo",
		Short: "Agent channel exits and time per message: the UART byte by byte beside the virtio console (KVM, synthetic echo guests)",
		Long: `Agent channel exits and time per message, side by side in one run.

kvm-synthetic: for each message size, an echo guest on /dev/kvm (no
kernel: it runs on PVM hosts) sends every message it receives back, first
over the UART (COM2) byte by byte as Linux's 8250 driver moves it, then
over the agent console (virtio, port themis.agent) one buffer per message.
Reported per round trip (a message each way): the vCPU exits the VMM
served and the wall time, and their ratios. The target: a 1 KiB message in
at most 3 exits. A missed target is reported, not an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Sizes = nil
			for _, s := range sizes {
				n, err := bench.ParseSize(s)
				if err != nil {
					return fmt.Errorf("--sizes: %w", err)
				}
				o.Sizes = append(o.Sizes, int(n))
			}
			if o.Messages < 1 {
				return fmt.Errorf("--messages %d: want at least 1", o.Messages)
			}
			o.Log, o.Progress = g.log, progress
			r, err := bench.Echo(cmd.Context(), o)
			if err != nil {
				return err
			}
			return printReport(g, r, r.Proto())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&sizes, "sizes", []string{"64", "1K", "16K"}, "message sizes (K suffix; at most 64K, whole 4 KiB buffers above 4K)")
	f.IntVar(&o.Messages, "messages", bench.DefaultEchoMessages, "round trips per size over the virtio console")
	f.IntVar(&o.UARTMessages, "uart-messages", 0, "round trips per size over the UART (0: 64 KiB each way, at least 3)")
	return cmd
}

// printReport writes a bench report: with --json its message m
// (writeProtoJSON), else its table.
func printReport(g *globals, r fmt.Stringer, m proto.Message) error {
	if g.json {
		return writeProtoJSON(m)
	}
	fmt.Print(r.String())
	return nil
}
