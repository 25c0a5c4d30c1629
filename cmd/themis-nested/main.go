// Command themis-nested runs the KVM backend's gated job inside an
// emulated AMD-V host (internal/nested), for CI on hosts whose /dev/kvm is
// not hardware virtualization:
//
//   - the TestKVMLinux* tests of vmm/kvm with THEMIS_REQUIRE_KVM=1, their
//     output turned into go test -json here and counted (internal/testcount):
//     it fails unless at least -min ran and none failed;
//   - themisctl explore --backend kvm and a clock sweep there, and the same
//     explore on the QEMU backend here: the digest and unique-state count
//     must be equal (a cross-backend differential of our own machinery).
//
// scripts/kvm-gated.sh --nested runs it; .ci/run calls that.
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

// defaultRun is the gated Linux tests plus the synthetic-guest tests of
// what hardware virtualization changes (port 0x61, the guest TLB, device
// DMA in the dirty set, a failed boot): the whole synthetic suite is
// ~100x slower under TCG than on this host's PVM.
const defaultRun = "^(TestKVMLinux|TestPITSpeakerPort|TestRestoreFlushesGuestTLB|TestDevicePathReverts|TestFailedBootReturnsError)"

func main() {
	var o options
	flag.StringVar(&o.work, "work", "", "work directory (kept); default a temporary one, removed unless the job fails")
	flag.StringVar(&o.run, "run", defaultRun, "the vmm/kvm tests to run there (-test.run)")
	flag.StringVar(&o.count, "count", "^TestKVMLinux", "the tests that must have run and passed: names (with subtests) matching this")
	flag.IntVar(&o.min, "min", 10, "fail unless at least this many tests matching -count ran (top-level and subtests: the conformance suite, its 8 subtests that run there, RestorePages)")
	flag.BoolVar(&o.explore, "explore", true, "also run explore and a clock sweep on --backend kvm there, and explore on QEMU here, and compare")
	flag.StringVar(&o.exploreArgs, "explore-args", "--fs ext2 --depth 2 --seed 7", "explore's arguments on both backends")
	flag.DurationVar(&o.timeout, "timeout", 60*time.Minute, "the whole job (each of at most three attempts gets a third, less 2 minutes)")
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
