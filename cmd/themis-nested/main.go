// Command themis-nested runs the KVM backend's gated job inside an
// emulated AMD-V host (internal/nested), for CI on hosts whose /dev/kvm is
// not hardware virtualization:
//
//   - each gated vmm/kvm test (each subtest of the conformance suite) with
//     THEMIS_REQUIRE_KVM=1, as a step of its own, its output turned into
//     go test -json here: it must have run and passed;
//   - themisctl explore --backend kvm and a clock sweep there, and the same
//     on the QEMU backend here: the digest, unique states and findings, and
//     every sweep cell, must be equal (a cross-backend differential);
//   - the same explore on a lane only the generic kernel flavour serves
//     (minix): that kernel boots on the KVM backend there and gives the
//     QEMU backend's digest.
//
// Each is retried, up to three attempts, only when an attempt ends with an
// emulator signature (nested.Classify: the emulated host's soft lockup,
// RCU stall or death, a guest's triple fault before ready, a silent
// boot); the host is stopped as soon as its console shows its own. Any
// other failure fails the job at once. The must-pass core must pass; other
// tests whose every attempt ended with a signature are inconclusive
// (docs/kvm.md). scripts/kvm-gated.sh --nested runs it; .ci/run calls that.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/themisfs/themis/internal/nested"
	"go.uber.org/zap"
)

func main() {
	var o options
	flag.StringVar(&o.work, "work", "", "work directory (kept); default a temporary one, removed unless the job fails")
	flag.StringVar(&o.run, "run", ".", "the gated tests to run there: a regexp over their names (TestKVMLinuxConformance/BootAndY2038, TestPITSpeakerPort, ...; each runs as a step of its own)")
	flag.BoolVar(&o.explore, "explore", true, "also run explore and a clock sweep on --backend kvm there, and explore on QEMU here, and compare")
	flag.StringVar(&o.exploreArgs, "explore-args", "--fs ext2 --depth 2 --seed 7", "explore's arguments on both backends")
	flag.BoolVar(&o.generic, "generic", true, "with -explore, also run explore on a lane of the generic kernel flavour (-generic-args) on --backend kvm there and on QEMU here, and compare: that kernel boots on the KVM backend")
	flag.StringVar(&o.genericArgs, "generic-args", "--fs minix --depth 1 --seed 7 --workers 1", "the generic flavour's explore arguments on both backends (--fs must name a lane only that flavour serves: f2fs, minix, nilfs2)")
	flag.StringVar(&o.inject, "inject-fault", "", "a fault the job must fail on at once, never retried: restore (every restore of the vmm/kvm test binary's Linux machines fails the verify gate) or digest (explore on kvm's digest changed before the comparison)")
	flag.DurationVar(&o.timeout, "timeout", 60*time.Minute, "the whole job (each boot of the emulated host gets its steps' timeouts, within what is left)")
	flag.BoolVar(&o.json, "json", false, "print the report as one JSON object")
	flag.IntVar(&o.cpus, "cpus", 2, "the emulated host's vCPUs")
	flag.BoolVar(&o.pin, "pin", false, "pin the job's programs to the emulated host's CPU 0 (taskset; stalls there: the emulated host loses its timer interrupts)")
	flag.StringVar(&o.accel, "accel", "tcg,thread=multi", "the emulated host's QEMU -accel")
	flag.StringVar(&o.qemu, "qemu", "", "the QEMU binary for the emulated host (default qemu-system-x86_64)")
	flag.StringVar(&o.cpu, "cpu", nested.DefaultCPU, "the emulated host's QEMU -cpu")
	flag.BoolVar(&o.cycles, "cycles", false, "run the Cycles subtest there too (it skips there by default: docs/kvm.md)")
	flag.Parse()
	cfg := zap.NewDevelopmentConfig()
	cfg.DisableStacktrace = true
	log, err := cfg.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rep, err := run(ctx, o, log)
	if rep != nil {
		if o.json {
			b, jerr := json.MarshalIndent(rep, "", "  ")
			if jerr != nil {
				fmt.Fprintln(os.Stderr, jerr)
			}
			fmt.Println(string(b))
		} else {
			rep.print(os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "themis-nested:", err)
		os.Exit(1)
	}
}
