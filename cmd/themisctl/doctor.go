package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/doctor"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/vmm"
)

func newDoctor(g *globals) *cobra.Command {
	var boot bool
	var restoreMode string
	var backend string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this host can run and which backend auto picks; --boot measures a real guest",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			r := doctor.Check(cmd.Context(), cache)
			if boot {
				mode := vmm.RestoreMode(restoreMode)
				if mode != vmm.RestoreDevices && mode != vmm.RestoreFull {
					return fmt.Errorf("--restore-mode %q: want devices or full", restoreMode)
				}
				b, err := doctor.BootCheck(cmd.Context(), doctor.BootOptions{
					Guest:    guest.Options{CacheDir: cache, Log: g.log},
					Restore:  mode,
					Backend:  backend,
					Progress: progress,
					Log:      g.log,
				})
				r.Boot = b
				if err != nil {
					r.BootError = err.Error()
					if g.json {
						if jerr := writeProtoJSON(r.Proto()); jerr != nil {
							return jerr
						}
					}
					return fmt.Errorf("doctor --boot: %w", err)
				}
			}
			if g.json {
				return writeProtoJSON(r.Proto())
			}
			return printDoctor(r)
		},
	}
	cmd.Flags().BoolVar(&boot, "boot", false, "boot a guest and measure boot, round trip, checkpoint, verified restore and the Y2038 witness")
	cmd.Flags().StringVar(&restoreMode, "restore-mode", string(vmm.RestoreDevices), "memory restore path: devices (x-ignore-shared, host puts RAM back) or full (snapshot RAM)")
	cmd.Flags().StringVar(&backend, "backend", "auto", "backend for --boot: auto (what doctor picks), qemu or kvm")
	return cmd
}

func printDoctor(r *doctor.Report) error {
	w := newTable()
	fmt.Fprintf(w, "KVM\t%s\t%s\n", r.KVMKind, r.KVMWhy)
	fmt.Fprintf(w, "QEMU\t%s\t%s\n", orNone(r.QEMU), r.QEMUVersion)
	for _, t := range r.Tools {
		state := "missing (apt-get install " + t.Package + ")"
		if t.Found {
			state = t.Path
		}
		fmt.Fprintf(w, "tool %s\t%s\t\n", t.Name, state)
	}
	fmt.Fprintf(w, "guest cache\t%s\t%d image(s)\n", r.CacheDir, r.CachedImages)
	fmt.Fprintf(w, "backend (auto)\t%s\t%s\n", r.Backend, r.BackendWhy)
	fmt.Fprintf(w, "explore revert (auto)\t%s\t%s\n", r.Revert, r.RevertWhy)
	fmt.Fprintf(w, "explore workers (auto)\t%d\tone per CPU this process may use (%d), at most 8, as many as the daemon has room for\n", r.ExploreWorkers, runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "host checkers\t%s\t%s\n", "sandbox", r.HostToolIsolation)
	fmt.Fprintf(w, "guest RAM dir\t%s\t%d MiB free (QEMU guests' RAM lives there)\n", r.ScratchDir, r.ScratchFreeMiB)
	for _, l := range r.Lanes {
		state := "ready"
		if !l.Ready {
			state = "not ready: " + l.Why
		}
		fmt.Fprintf(w, "lane %s\t%s\tfamily %s, checker %s, kernel %s\n", l.FS, state, l.Family, l.Checker, guest.FlavorName(l.Flavor))
	}
	if b := r.Boot; b != nil {
		fmt.Fprintf(w, "kernel\t%s\t\n", b.KernelVersion)
		fmt.Fprintf(w, "guest image\t%.0f ms\tcached=%v\n", b.ImageMs, b.ImageCached)
		fmt.Fprintf(w, "boot to agent-ready\t%.0f ms\t\n", b.BootMs)
		fmt.Fprintf(w, "agent round trip\t%.0f µs\tmedian of no-op pings\n", b.AgentRTTUs)
		fmt.Fprintf(w, "checkpoint\t%.1f ms\t\n", b.CheckpointMs)
		fmt.Fprintf(w, "restore (%s)\t%.1f ms\tmedian, verified=%v\n", b.RestoreMode, b.RestoreMs, b.RestoreVerified)
		fmt.Fprintf(w, "Y2038 witness\tset %d\tguest stat %d, on disk %d (ext2 -I 128)\n", b.Y2038Set, b.Y2038Stored, b.Y2038OnDisk)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem\t%s\t\n", p)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func cacheDir(g *globals) (string, error) {
	if g.cacheDir != "" {
		return g.cacheDir, nil
	}
	return guest.DefaultCacheDir()
}
