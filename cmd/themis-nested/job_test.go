package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/themisfs/themis/internal/nested"
)

func TestSweepCellsCompare(t *testing.T) {
	kvm := []byte(`{"lane":"ext2","value":2147483648,"guest":2147483647}` + "\n" + `{"value":1,"lane":"ext2"}` + "\n")
	same := []byte(`{"lane":"ext2","value":1}` + "\n" + `{"guest":2147483647,"value":2147483648,"lane":"ext2"}` + "\n")
	other := []byte(`{"lane":"ext2","value":1}` + "\n" + `{"guest":2147483648,"value":2147483648,"lane":"ext2"}` + "\n")
	k, err := sweepCells(kvm)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		qemu  []byte
		diffs int
	}{{"same cells, other order and key order", same, 0}, {"one cell differs", other, 2}} {
		t.Run(tt.name, func(t *testing.T) {
			q, err := sweepCells(tt.qemu)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffLines(k, q); len(d) != tt.diffs {
				t.Errorf("diffLines = %q, want %d lines", d, tt.diffs)
			}
		})
	}
	if _, err := sweepCells([]byte("not json\n")); err == nil {
		t.Error("a line that is not JSON was accepted")
	}
}

func TestParseExplore(t *testing.T) {
	s, err := parseExplore([]byte(`{"backend":"kvm","states":24,"unique_states":8,"digest":"a0b6"}`))
	if err != nil || s.Backend != "kvm" || s.UniqueStates != 8 || s.Digest != "a0b6" {
		t.Fatalf("parseExplore = %+v, %v", s, err)
	}
	for _, bad := range []string{`{"states":1}`, `{`} {
		if _, err := parseExplore([]byte(bad)); err == nil {
			t.Errorf("parseExplore(%s) accepted", bad)
		}
	}
}

func TestJobPlan(t *testing.T) {
	o := options{run: "^TestKVMLinux", exploreArgs: "--fs ext2 --seed 7", explore: true, pin: true}
	p := jobPlan(o, []string{"PATH=/bin"})
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range p.Steps {
		names = append(names, s.Name)
		if s.Argv[0] != "/usr/bin/taskset" {
			t.Errorf("step %s: argv %q, want it pinned with taskset", s.Name, s.Argv)
		}
	}
	if !slices.Equal(names, []string{"gated", "explore-kvm", "sweep-kvm"}) {
		t.Errorf("steps %q", names)
	}
	if a := strings.Join(p.Steps[1].Argv, " "); !strings.Contains(a, "explore --backend kvm --fs ext2 --seed 7") {
		t.Errorf("explore step: %s", a)
	}
	o.explore, o.pin = false, false
	if p := jobPlan(o, nil); len(p.Steps) != 1 || p.Steps[0].Argv[0] != "/bin-themis/kvm.test" {
		t.Errorf("without explore or pin: %+v", p.Steps)
	}
	marker := nested.EmulatedEnv + "=1"
	if env := jobPlan(o, []string{marker}).Steps[0].Env; !slices.Contains(env, marker) {
		t.Errorf("env %q: want %s (Cycles skips there)", env, marker)
	}
	o.cycles = true
	if env := jobPlan(o, []string{marker}).Steps[0].Env; slices.Contains(env, marker) || !slices.Contains(env, nested.EmulatedEnv+"=cycles") {
		t.Errorf("with -cycles, env %q: want the marker changed so that Cycles runs", env)
	}
}

func TestCrashedTests(t *testing.T) {
	ev := func(action, test, output string) string {
		return `{"Action":"` + action + `","Test":"` + test + `","Output":` + strconv.Quote(output) + "}\n"
	}
	crash := "boot: vmm: guest died: kvm: vcpu exit " + tripleFault + "\n"
	silent := "boot: kvm: boot: no \"themis-agent: ready\" on the console: context deadline exceeded\n        console:\n          (no console output)\n"
	stopped := "boot: kvm: boot: no \"themis-agent: ready\" on the console: context deadline exceeded\n        console:\n          [    0.5] Kernel panic\n"
	for _, tt := range []struct {
		name, events, want string
	}{
		{"a triple fault", ev("output", "TestKVMLinuxConformance/Hung", crash) + ev("fail", "TestKVMLinuxConformance/Hung", "") + ev("fail", "TestKVMLinuxConformance", ""),
			"the guest triple-faulted or never booted in TestKVMLinuxConformance/Hung"},
		{"a silent boot", ev("output", "TestKVMLinuxConformance/BootAndY2038", silent) + ev("fail", "TestKVMLinuxConformance/BootAndY2038", "") + ev("fail", "TestKVMLinuxConformance", ""),
			"the guest triple-faulted or never booted in TestKVMLinuxConformance/BootAndY2038"},
		{"a boot that printed and stopped", ev("output", "TestK/Boot", stopped) + ev("fail", "TestK/Boot", ""), ""},
		{"another failure too", ev("output", "TestA/x", crash) + ev("fail", "TestA/x", "") + ev("output", "TestB", "root differs\n") + ev("fail", "TestB", ""), ""},
		{"no triple fault", ev("output", "TestB", "restore verification failed\n") + ev("fail", "TestB", ""), ""},
		{"nothing failed", ev("pass", "TestB", ""), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := crashedTests([]byte(tt.events)); got != tt.want {
				t.Errorf("crashedTests = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStalledExplore(t *testing.T) {
	t.Parallel()
	stall := "link on ext2: guest gone: kvm: agent call: agent: call 28: context deadline exceeded (agent: read frame body (61 bytes): i/o timeout) (vCPU RIP 0xffffffffc0680dcc RFLAGS 0x10246, MP state 0, interrupt injected 0 vector 0x33 shadow 0, " + stallSignature + "; ...)"
	sum := func(stopped string, findings ...[2]string) *exploreSummary {
		s := &exploreSummary{Stopped: stopped}
		for _, f := range findings {
			s.FindingList = append(s.FindingList, struct {
				Kind   string `json:"kind"`
				Detail string `json:"detail"`
			}{f[0], f[1]})
		}
		return s
	}
	for _, tt := range []struct {
		name  string
		sum   *exploreSummary
		stall bool
	}{
		{"the emulator's stall", sum("guest-died", [2]string{"guest-died", stall}), true},
		{"no summary", nil, false},
		{"a finished run", sum(""), false},
		{"died without the signature", sum("guest-died", [2]string{"guest-died", "restore: guest gone: vmm: guest died"}), false},
		{"a real finding too", sum("guest-died", [2]string{"state-divergence", "d-00: mode"}, [2]string{"guest-died", stall}), false},
	} {
		if got := stalledExplore(tt.sum) != ""; got != tt.stall {
			t.Errorf("%s: stalled %v, want %v", tt.name, got, tt.stall)
		}
	}
}

// TestMeasured: only the lines that carry the mark come out, trimmed.
func TestMeasured(t *testing.T) {
	raw := []byte("=== RUN   TestKVMLinuxConformance/ReplayPasses\n    suite.go:429: replay fidelity: 4 passes, clock pinned: 1 distinct disks, 4 distinct RAM images\n--- PASS: x\nother line\n")
	got := measured(raw)
	if len(got) != 1 || got[0] != "suite.go:429: replay fidelity: 4 passes, clock pinned: 1 distinct disks, 4 distinct RAM images" {
		t.Errorf("measured = %q", got)
	}
	if got := measured([]byte("nothing here\n")); got != nil {
		t.Errorf("measured of no mark = %q", got)
	}
}

// TestStepCrashed: a run step's error reads as the emulated host's crash
// by the same signatures as a gated test's (the sweep step's silent boot
// of 2026-12-02), and not when the guest printed and stopped.
func TestStepCrashed(t *testing.T) {
	for _, tt := range []struct {
		err  string
		want bool
	}{
		{"==> clock sweep on ext2\nthemisctl: rpc error: code = DeadlineExceeded desc = sweep: session s-ae8eb81010ee: boot: kvm: boot: no \"themis-agent: ready\" on the console: context deadline exceeded\nconsole:\n  (no console output)\n", true},
		{"themisctl: explore: guest died: kvm: vcpu exit " + tripleFault, true},
		{"themisctl: boot: no \"themis-agent: ready\" on the console: context deadline exceeded\nconsole:\n  [    0.4] Kernel panic", false},
		{"themisctl: sweep: lane ext2: errno 5", false},
	} {
		if got := crashed(tt.err); got != tt.want {
			t.Errorf("crashed(%q) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
