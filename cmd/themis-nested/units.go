package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/nested"
)

// unit is what the job runs in the emulated host as a plan step of its
// own and decides on by its attempts (nested.Decide): one gated test, one
// subtest of the conformance suite, or one themisctl run there.
type unit struct {
	Name     string // "TestKVMLinuxConformance/BootAndY2038", "TestPITSpeakerPort", "explore-kvm", "sweep-kvm"
	Step     string // its plan step's name
	MustPass bool   // the must-pass core: an emulator signature in every attempt fails the job
	Test     bool   // a test of the vmm/kvm test binary (else a themisctl run)
}

// conformanceSuite is TestKVMLinuxConformance's subtests, in the suite's
// order (vmm/vmmtest/suite.go; TestConformanceUnits keeps them equal).
var conformanceSuite = []string{"BootAndY2038", "RestoreSoundness", "Nested", "DeleteMiddleCheckpoint",
	"StaleTranslatedCode", "Cycles", "HungGuestCleansUp", "FailedRestoreBreaks", "ReplayPasses"}

// otherGated are the other vmm/kvm tests run there: RestorePages and the
// synthetic-guest tests of what hardware virtualization changes (port
// 0x61, the guest TLB, device DMA in the dirty set, a failed boot); the
// whole synthetic suite is ~100x slower under TCG than on PVM.
var otherGated = []string{"TestKVMLinuxRestorePages", "TestPITSpeakerPort", "TestRestoreFlushesGuestTLB", "TestDevicePathReverts", "TestFailedBootReturnsError"}

// The themisctl runs there, compared with the QEMU backend here: explore
// and the clock sweep on the cloud flavour, and explore on a lane only the
// generic flavour serves (-generic-args), which boots that kernel there.
const (
	exploreUnit = "explore-kvm"
	sweepUnit   = "sweep-kvm"
	genericUnit = "explore-generic-kvm"
)

// mustPass is the core that must pass in some attempt: boot and Y2038 and
// restore soundness on the KVM backend, explore --backend kvm equal to
// the QEMU backend's digest, on both kernel flavours.
var mustPass = map[string]bool{
	"TestKVMLinuxConformance/BootAndY2038":     true,
	"TestKVMLinuxConformance/RestoreSoundness": true,
	exploreUnit: true,
	genericUnit: true,
}

// exploreArgsOf is explore's arguments of a unit that runs it (on both backends).
func exploreArgsOf(o options, name string) (string, bool) {
	switch name {
	case exploreUnit:
		return o.exploreArgs, true
	case genericUnit:
		return o.genericArgs, true
	}
	return "", false
}

// selectUnits lists the job's units: the gated tests whose names match
// o.run (Cycles only with -cycles: it skips there otherwise), then
// explore and the sweep with -explore, and the generic flavour's explore
// with -explore and -generic.
func selectUnits(o options) ([]unit, error) {
	re, err := regexp.Compile(o.run)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	var us []unit
	add := func(name, step string, test bool) {
		us = append(us, unit{Name: name, Step: step, MustPass: mustPass[name], Test: test})
	}
	for _, sub := range conformanceSuite {
		name := "TestKVMLinuxConformance/" + sub
		if (sub == "Cycles" && !o.cycles) || !re.MatchString(name) {
			continue
		}
		add(name, "conf-"+strings.ToLower(sub), true)
	}
	for _, name := range otherGated {
		if re.MatchString(name) {
			add(name, strings.ToLower(strings.TrimPrefix(name, "Test")), true)
		}
	}
	if o.explore {
		add(exploreUnit, exploreUnit, false)
		add(sweepUnit, sweepUnit, false)
		if o.generic {
			if err := checkGenericArgs(o.genericArgs); err != nil {
				return nil, err
			}
			add(genericUnit, genericUnit, false)
		}
	}
	if len(us) == 0 {
		return nil, fmt.Errorf("-run %q selects no test", o.run)
	}
	return us, nil
}

// checkGenericArgs: the generic flavour's explore must name its lanes
// with --fs, and one of them must need that flavour (guest.FlavorOf), or
// the unit would boot the cloud kernel and prove nothing of the generic.
func checkGenericArgs(args string) error {
	f := strings.Fields(args)
	var lanes string
	for i, a := range f {
		if v, ok := strings.CutPrefix(a, "--fs="); ok {
			lanes = v
		} else if a == "--fs" && i+1 < len(f) {
			lanes = f[i+1]
		}
	}
	if lanes == "" {
		return fmt.Errorf("-generic-args %q: want --fs with a lane of the generic flavour (f2fs, minix, nilfs2)", args)
	}
	specs, err := guest.ParseLaneSpecs(lanes)
	if err != nil {
		return fmt.Errorf("-generic-args: %w", err)
	}
	if guest.FlavorOf(specs) != guest.FlavorGeneric {
		return fmt.Errorf("-generic-args: --fs %s boots the %s flavour: want a lane only the generic flavour serves (f2fs, minix, nilfs2)", lanes, guest.FlavorOf(specs))
	}
	return nil
}

// testRunPattern is the test binary's -test.run for one unit: the test
// alone, or the one subtest.
func testRunPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// ledger is every unit's attempts so far.
type ledger struct {
	units    []unit
	attempts map[string][]nested.Attempt
}

func (l *ledger) verdict(u unit) nested.Verdict {
	return nested.Decide(l.attempts[u.Name], u.MustPass)
}

// with lists the units whose verdict is v, in order.
func (l *ledger) with(v nested.Verdict) []unit {
	var out []unit
	for _, u := range l.units {
		if l.verdict(u) == v {
			out = append(out, u)
		}
	}
	return out
}

// booter runs units in one boot of the emulated host (the boot'th, from
// 1) and returns an attempt for each that got to run; those after the
// step the host died or was stopped in get none.
type booter func(ctx context.Context, boot int, units []unit) (map[string]nested.Attempt, error)

// schedule boots the emulated host until every unit has a verdict, each
// boot running the units that have none yet (an emulator signature asked
// for another attempt, or they did not get to run). A failure without a
// signature stops it after the boot it happened in: nothing is retried
// then. An error is the job's own (nothing could be run).
func schedule(ctx context.Context, us []unit, boot booter) (*ledger, error) {
	l := &ledger{units: us, attempts: map[string][]nested.Attempt{}}
	empty := 0
	for n := 1; ; n++ {
		pending := l.with(nested.Retry)
		if len(pending) == 0 || len(l.with(nested.Fail)) > 0 {
			return l, nil
		}
		got, err := boot(ctx, n, pending)
		if err != nil {
			return l, err
		}
		if len(got) == 0 {
			// The host ended before its first step: bounded like a test's attempts.
			if empty++; empty >= nested.MaxAttempts {
				return l, fmt.Errorf("the emulated host ended %d boots before running a step", empty)
			}
		}
		for _, u := range pending {
			if a, ok := got[u.Name]; ok {
				a.Boot = n
				l.attempts[u.Name] = append(l.attempts[u.Name], a)
			}
		}
	}
}
