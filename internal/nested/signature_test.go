package nested

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/guest"
	"go.uber.org/zap/zaptest"
)

func readSig(t *testing.T, name string) []byte {
	t.Helper()
	if name == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join("testdata", "signatures", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClassify reads the emulated host's console and a test's output as
// they are written (testdata/signatures: the kernel's printk formats, the
// KVM backend's boot errors).
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		console, output string
		want            Signature
		evidence        string
	}{
		{"console-soft-lockup.log", "", SoftLockup, "watchdog: BUG: soft lockup - CPU#1 stuck for 331s! [kvm.test:231]"},
		{"console-rcu-sched.log", "", RCUStall, "rcu: INFO: rcu_sched self-detected stall on CPU"},
		{"console-rcu-preempt.log", "", RCUStall, "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:"},
		{"console-panic.log", "", HostDied, "Kernel panic - not syncing: Fatal exception in interrupt"},
		{"console-clean.log", "", None, ""},
		// The host's signature explains a test failure too.
		{"console-soft-lockup.log", "output-verify-failed.txt", SoftLockup, "soft lockup"},
		{"console-clean.log", "output-triple-fault-boot.txt", TripleFaultBeforeReady, "during boot: kvm: vcpu exit SHUTDOWN at RIP 0xfff0: triple fault"},
		{"console-clean.log", "output-silent-boot.txt", SilentBoot, "(no console output)"},
		{"", "stderr-sweep-silent-boot.txt", SilentBoot, "themis-agent: ready"},
		{"console-clean.log", "output-stalled-boot.txt", StalledBoot, "Failed to access perfctr msr"},
		{"", "stderr-explore-stalled-boot.txt", StalledBoot, "Failed to access perfctr msr"},
		// Ours, never retried: a triple fault after the agent was ready (a
		// bad restore can do that), a restore that does not verify, a boot
		// that printed and stopped, an error from our code.
		{"console-clean.log", "output-triple-fault-after-ready.txt", None, ""},
		{"console-clean.log", "output-verify-failed.txt", None, ""},
		{"console-clean.log", "output-boot-stopped.txt", None, ""},
		{"console-clean.log", "output-init-stalled.txt", None, ""},
		{"", "stderr-explore-eio.txt", None, ""},
		// A guest's panic and soft lockup quoted in the console (indented)
		// or in the test's output are the guest's, not the host's.
		{"console-quoted-guest.log", "output-boot-stopped.txt", None, ""},
		{"", "", None, ""},
	} {
		t.Run(tt.console+"+"+tt.output, func(t *testing.T) {
			console, output := readSig(t, tt.console), readSig(t, tt.output)
			if got := Classify(console, output); got != tt.want {
				t.Errorf("Classify = %v, want %v", got, tt.want)
			}
			if _, ev := Evidence(console, output); !strings.Contains(ev, tt.evidence) || (tt.evidence == "") != (ev == "") {
				t.Errorf("Evidence = %q, want it to contain %q", ev, tt.evidence)
			}
		})
	}
}

func TestHostLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		line string
		want Signature
	}{
		{"[  412.318503] watchdog: BUG: soft lockup - CPU#1 stuck for 331s! [kvm.test:231]\r\n", SoftLockup},
		{"watchdog: BUG: soft lockup - CPU#0 stuck for 23s! [swapper/0:0]", SoftLockup},
		{"2026-12-02T18:41:07.553Z INFO step[  40.1] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [x:1]", SoftLockup}, // printk mid-line
		{"[  388.101223] INFO: rcu_sched self-detected stall on CPU", RCUStall},
		{"[  388.101223] rcu: INFO: rcu_sched detected expedited stalls on CPUs/tasks: { 1-... } 21002 jiffies s: 1137 root: 0x2/.", RCUStall},
		{"[   97.441201] Kernel panic - not syncing: softlockup: hung tasks", HostDied},
		{"          [    3.211004] Kernel panic - not syncing: VFS: Unable to mount root fs", None},
		{"\t[  1.0] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [a:1]", None},
		{"[  412.320117] Modules linked in: kvm_amd ccp kvm", None},
		{"[   41.993402] kvm [231]: vcpu0, guest rIP: 0xffffffffb3a7e1a8 Unhandled WRMSR(0xc0010007) = 0x0", None},
		{"", None},
	} {
		if got := HostLine([]byte(tt.line)); got != tt.want {
			t.Errorf("HostLine(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
}

func TestSignatureText(t *testing.T) {
	t.Parallel()
	for s := None; s <= SilentBoot; s++ {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got Signature
		if err := got.UnmarshalText(b); err != nil || got != s {
			t.Errorf("%v: round trip %v, %v", s, got, err)
		}
	}
	var s Signature
	if err := s.UnmarshalText([]byte("cosmic-ray")); err == nil {
		t.Error("an unknown signature was accepted")
	}
}

// TestDecide is the rule: a failure without a signature fails at once
// (never retried: a deliberately broken restore must fail the job); a
// signature retries, up to MaxAttempts; after that the must-pass core
// fails and any other test is inconclusive.
func TestDecide(t *testing.T) {
	t.Parallel()
	pass := Attempt{Passed: true}
	ours := Attempt{Detail: "restore 1: vmm: restore verification failed"}
	lock := Attempt{Signature: SoftLockup}
	boot := Attempt{Signature: TripleFaultBeforeReady}
	for _, tt := range []struct {
		name     string
		attempts []Attempt
		mustPass bool
		want     Verdict
	}{
		{"not run yet", nil, true, Retry},
		{"passed", []Attempt{pass}, true, Pass},
		{"restore did not verify: fails at once", []Attempt{ours}, false, Fail},
		{"restore did not verify, must pass: fails at once", []Attempt{ours}, true, Fail},
		{"a signature: retry", []Attempt{lock}, true, Retry},
		{"two signatures: retry", []Attempt{lock, boot}, false, Retry},
		{"passed after a signature", []Attempt{lock, pass}, true, Pass},
		{"ours after a signature: fails", []Attempt{lock, ours}, false, Fail},
		{"three signatures, must pass: fails", []Attempt{lock, boot, lock}, true, Fail},
		{"three signatures: inconclusive", []Attempt{lock, boot, lock}, false, Inconclusive},
		{"passed on the last attempt", []Attempt{lock, boot, pass}, true, Pass},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.attempts, tt.mustPass); got != tt.want {
				t.Errorf("Decide = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWatcher feeds a console in uneven chunks: the first host signature
// is reported once, with the step that was running, and each step keeps
// its own part of the console.
func TestWatcher(t *testing.T) {
	t.Parallel()
	console := string(readSig(t, "console-clean.log")) + StartLine("conf-nested") + "[   97.420101] BUG: unable to handle page fault\n" +
		string(readSig(t, "console-rcu-sched.log")) + string(readSig(t, "console-panic.log"))
	var hits []Hit
	w := NewWatcher(func(h Hit) { hits = append(hits, h) })
	for i, n := 0, 1; i < len(console); n = n*3%97 + 1 {
		j := min(i+n, len(console))
		if _, err := w.Write([]byte(console[i:j])); err != nil {
			t.Fatal(err)
		}
		i = j
	}
	if len(hits) != 1 || hits[0].Signature != RCUStall || hits[0].Step != "conf-replaypasses" {
		t.Fatalf("hits = %+v, want one rcu-stall in conf-replaypasses", hits)
	}
	if got := w.Running(); got != "conf-nested" {
		t.Errorf("Running = %q, want conf-nested (no end mark)", got)
	}
	if got := w.Started(); strings.Join(got, ",") != "conf-bootandy2038,conf-nested,conf-replaypasses,conf-nested" {
		t.Errorf("Started = %q", got)
	}
	if seg := string(w.Segment("conf-bootandy2038")); !strings.Contains(seg, "WRMSR") || strings.Contains(seg, StepMark) || strings.Contains(seg, "step ended") {
		t.Errorf("Segment(conf-bootandy2038) = %q, want its one kernel line", seg)
	}
	if seg := w.Segment("conf-nested"); Classify(seg, nil) != HostDied {
		t.Errorf("Segment(conf-nested) = %q, want the panic", seg)
	}
}

// TestWatcherStalled: a step that outlives its own timeout (which the
// init enforces by the emulated host's clock) by the grace, with the
// console silent as long, is the host's own stop (HostStalled), reported
// once with the step; a step within its time, a console that still
// speaks, a step that ended, or a signature already seen is not.
func TestWatcherStalled(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Minute
	timeout := func(step string) time.Duration {
		if step == "short" {
			return time.Minute
		}
		return 8 * time.Minute
	}
	t0 := time.Date(2026, 12, 3, 7, 51, 29, 0, time.UTC)
	type consoleLine struct {
		at   time.Duration // after t0
		text string
	}
	for _, tt := range []struct {
		name    string
		console []consoleLine
		check   time.Duration // after t0
		want    bool
	}{
		{"silent past timeout and grace", []consoleLine{{0, StartLine("conf-deletemiddlecheckpoint")}}, 10*time.Minute + time.Second, true},
		{"within timeout and grace", []consoleLine{{0, StartLine("conf-deletemiddlecheckpoint")}}, 10 * time.Minute, false},
		{"a shorter step's own timeout", []consoleLine{{0, StartLine("short")}}, 3*time.Minute + time.Second, true},
		{"the console spoke lately", []consoleLine{{0, StartLine("conf-deletemiddlecheckpoint")}, {9 * time.Minute, "[  120.1] kvm: a line\n"}}, 10*time.Minute + time.Second, false},
		{"the step ended", []consoleLine{{0, StartLine("short")}, {30 * time.Second, EndLine("short")}}, 20 * time.Minute, false},
		{"a signature came first", []consoleLine{{0, StartLine("short")}, {10 * time.Second, "[   97.4] watchdog: BUG: soft lockup - CPU#1 stuck for 26s! [kvm.test:188]\n"}}, 20 * time.Minute, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := t0
			var hits []Hit
			w := NewWatcher(func(h Hit) { hits = append(hits, h) })
			w.now = func() time.Time { return now }
			for _, c := range tt.console {
				now = t0.Add(c.at)
				if _, err := w.Write([]byte(c.text)); err != nil {
					t.Fatal(err)
				}
			}
			before := len(hits)
			now = t0.Add(tt.check)
			h, got := w.Stalled(timeout, grace)
			if got != tt.want {
				t.Fatalf("Stalled = %+v, %v; want %v", h, got, tt.want)
			}
			if !got {
				if len(hits) != before {
					t.Errorf("onHit called: %+v", hits)
				}
				return
			}
			if h.Signature != HostStalled || h.Step != w.Running() || !strings.Contains(h.Line, "past its timeout") || len(hits) != 1 || hits[0] != h {
				t.Errorf("hit %+v (onHit %+v), want host-stalled in the running step, reported once", h, hits)
			}
			if hw, ok := w.Hit(); !ok || hw != h {
				t.Errorf("Hit() = %+v, %v; want the stall recorded", hw, ok)
			}
			if _, again := w.Stalled(timeout, grace); again {
				t.Error("the stall was reported twice")
			}
		})
	}
}

// TestRunStopsOnSignature boots a fake QEMU that finishes one step, then
// prints a soft lockup and hangs: Run stops it within seconds (not at its
// timeout), names the signature and the step, and reads the first step's
// result back from the disk.
func TestRunStopsOnSignature(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	work := t.TempDir()
	st, err := NewStage(filepath.Join(work, "root"))
	if err != nil {
		t.Fatal(err)
	}
	result := filepath.Join(work, "result.json")
	if err := os.WriteFile(result, []byte(`{"kernel":"fake","kvm":"true: fake","steps":[{"name":"one","exit_code":0,"seconds":1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	qemu := filepath.Join(work, "qemu")
	script := `#!/bin/sh
for a in "$@"; do case "$a" in file=*) disk=${a#file=}; disk=${disk%%,*};; esac; done
debugfs -w -R "write ` + result + ` /out/result.json" "$disk" >/dev/null 2>&1 || exit 3
printf '` + strings.ReplaceAll(StartLine("one")+EndLine("one")+StartLine("two"), "\n", `\n`) + `'
echo "[  412.318503] watchdog: BUG: soft lockup - CPU#1 stuck for 331s! [kvm.test:231]"
exec sleep 120
`
	if err := os.WriteFile(qemu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	plan := Plan{Steps: []Step{{Name: "one", Argv: []string{"/x"}}, {Name: "two", Argv: []string{"/x"}}}}
	t0 := time.Now()
	out, err := Run(context.Background(), Options{WorkDir: work, Stage: st, Plan: plan, QEMU: qemu, Timeout: 2 * time.Minute,
		Host: &guest.Image{Kernel: "/fake/kernel", Initramfs: "/fake/initrd"}, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Minute {
		t.Errorf("Run took %v: the signature did not stop it", d)
	}
	if out.Stopped == nil || out.Stopped.Signature != SoftLockup || out.Stopped.Step != "two" || out.Running != "two" {
		t.Errorf("Stopped = %+v, Running %q: want a soft lockup in step two", out.Stopped, out.Running)
	}
	if len(out.Result.Steps) != 1 || out.Result.Steps[0].Name != "one" || out.Finished(plan) {
		t.Errorf("result steps = %+v, want step one's", out.Result.Steps)
	}
	if Classify(out.StepConsole("two"), nil) != SoftLockup || !out.StepStarted("one") {
		t.Errorf("step two's console %q", out.StepConsole("two"))
	}
}
