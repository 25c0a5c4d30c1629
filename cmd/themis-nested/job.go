package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/nested"
	"github.com/themisfs/themis/internal/testcount"
	"go.uber.org/zap"
)

type options struct {
	work, run, count   string
	exploreArgs        string
	min, cpus          int
	accel, qemu, cpu   string
	cycles             bool
	explore, json, pin bool
	timeout            time.Duration
}

// sweepArgs is the clock sweep run on the KVM backend there and the QEMU
// backend here: the Y2038 pair on an ext2 (-I 128) lane.
var sweepArgs = []string{"sweep", "clock", "--fs", "ext2", "--values", "2147483647,2147483648", "--ops", "create,touch"}

// report is what the job found.
type report struct {
	WorkDir      string              `json:"work_dir"`
	HostKernel   string              `json:"host_kernel"`
	HostKVM      string              `json:"host_kvm"`
	WallS        float64             `json:"wall_s"` // the emulated host, boot to power off
	Steps        []nested.StepResult `json:"steps"`
	Tests        testcount.Result    `json:"tests"`
	ExploreKVM   *exploreSummary     `json:"explore_kvm,omitempty"`
	ExploreQEMU  *exploreSummary     `json:"explore_qemu,omitempty"`
	SweepRows    int                 `json:"sweep_rows"`
	SweepDiffers []string            `json:"sweep_differs,omitempty"`
	Retried      []string            `json:"retried,omitempty"` // attempts ended by the emulated host's own crash
	// Measured are the gated tests' measurement lines (measuredMark), as
	// the tests logged them: the KVM backend's replay fidelity.
	Measured []string `json:"measured,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// exploreSummary is the part of explore's --json output compared.
type exploreSummary struct {
	Backend      string  `json:"backend"`
	States       int64   `json:"states"`
	UniqueStates int64   `json:"unique_states"`
	Findings     int64   `json:"findings"`
	Digest       string  `json:"digest"`
	StatesPerSec float64 `json:"states_per_sec"`
	ElapsedS     float64 `json:"elapsed_s"`
	OpS          float64 `json:"op_s"`
	FingerprintS float64 `json:"fingerprint_s"`
	RestoreS     float64 `json:"restore_s"`
	Stopped      string  `json:"stopped"`
	FindingList  []struct {
		Kind   string `json:"kind"`
		Detail string `json:"detail"`
	} `json:"finding_list"`
}

func (r *report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o options, log *zap.Logger) (*report, error) {
	re, err := regexp.Compile(o.count)
	if err != nil {
		return nil, fmt.Errorf("-count: %w", err)
	}
	keep := o.work != ""
	if !keep {
		if o.work, err = os.MkdirTemp("", "themis-nested-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return nil, err
	}
	rep := &report{WorkDir: o.work}
	bins := filepath.Join(o.work, "bin")
	log.Info("building static binaries", zap.String("dir", bins))
	if err := guest.BuildStatic(ctx, "./vmm/kvm", filepath.Join(bins, "kvm.test"), true); err != nil {
		return rep, err
	}
	if err := guest.BuildStatic(ctx, "./cmd/themisctl", filepath.Join(bins, "themisctl"), false); err != nil {
		return rep, err
	}
	cache, err := guest.DefaultCacheDir()
	if err != nil {
		return rep, err
	}
	img, err := guest.Build(ctx, guest.Options{CacheDir: cache, Log: log})
	if err != nil {
		return rep, err
	}
	st, err := nested.NewStage(filepath.Join(o.work, "root"))
	if err != nil {
		return rep, err
	}
	env, err := nested.StageProject(st, img, map[string]string{"kvm.test": filepath.Join(bins, "kvm.test"), "themisctl": filepath.Join(bins, "themisctl")})
	if err != nil {
		return rep, err
	}
	plan := jobPlan(o, env)
	for attempt := 1; ; attempt++ {
		// The emulated host's own crash (docs/kvm.md) runs the job again,
		// up to maxAttempts in all; any other problem ends it at once.
		rep.Problems = nil
		crash := runAttempt(ctx, rep, o, log, cache, st, plan, re, filepath.Join(bins, "themisctl"))
		if len(rep.Problems) == 0 || crash == "" || attempt == maxAttempts {
			break
		}
		rep.Retried = append(rep.Retried, fmt.Sprintf("attempt %d: %s; problems: %s", attempt, crash, strings.Join(rep.Problems, "; ")))
		log.Warn("the emulated host crashed; running the job again", zap.String("crash", crash), zap.Int("attempt", attempt+1), zap.Int("of", maxAttempts))
		if err := keepAttempt(o.work, attempt); err != nil {
			return rep, err
		}
	}
	if len(rep.Problems) > 0 {
		return rep, fmt.Errorf("%d problems (work directory kept: %s)", len(rep.Problems), o.work)
	}
	if !keep {
		if err := os.RemoveAll(o.work); err != nil {
			log.Warn("remove work directory", zap.Error(err))
		}
		rep.WorkDir = ""
	}
	return rep, nil
}

func jobPlan(o options, env []string) nested.Plan {
	// argv runs a program of BinDir, pinned to the emulated host's CPU 0
	// with -pin (see the flag).
	argv := func(name string, args ...string) []string {
		a := []string{filepath.Join(nested.BinDir, name)}
		if o.pin {
			a = append([]string{"/usr/bin/taskset", "-c", "0"}, a...)
		}
		return append(a, args...)
	}
	withEnv := func(extra ...string) []string {
		out := append([]string(nil), env...)
		if o.cycles { // the emulated host's marker, set so that Cycles runs
			for i, e := range out {
				if strings.HasPrefix(e, nested.EmulatedEnv+"=") {
					out[i] = nested.EmulatedEnv + "=cycles"
				}
			}
		}
		return append(out, extra...)
	}
	plan := nested.Plan{Steps: []nested.Step{{
		Name:    "gated",
		Argv:    argv("kvm.test", "-test.v=test2json", "-test.count=1", "-test.timeout=13m", "-test.run", o.run),
		Env:     withEnv("THEMIS_REQUIRE_KVM=1", "THEMIS_CYCLES_VERIFY="+os.Getenv("THEMIS_CYCLES_VERIFY"), "THEMIS_CYCLES_NORESTORE="+os.Getenv("THEMIS_CYCLES_NORESTORE")),
		Timeout: nested.Duration(14 * time.Minute), Echo: true,
	}}}
	if o.explore {
		plan.Steps = append(plan.Steps,
			nested.Step{Name: "explore-kvm", Argv: argv("themisctl", append([]string{"--json", "explore", "--backend", "kvm"}, strings.Fields(o.exploreArgs)...)...),
				Env: withEnv(), Timeout: nested.Duration(5 * time.Minute)},
			nested.Step{Name: "sweep-kvm", Argv: argv("themisctl", append(append([]string{"--json"}, sweepArgs...), "--backend", "kvm")...),
				Env: withEnv(), Timeout: nested.Duration(5 * time.Minute)})
	}
	return plan
}

// runAttempt runs the plan in the emulated host once and records what it
// found in rep. It returns a description of an emulated-host crash when
// every problem is explained by one (the guest triple-faulted with no
// restore to blame, or the host itself died), else "".
func runAttempt(ctx context.Context, rep *report, o options, log *zap.Logger, cache string, st *nested.Stage, plan nested.Plan, re *regexp.Regexp, themisctl string) string {
	out, err := nested.Run(ctx, nested.Options{CacheDir: cache, WorkDir: o.work, Stage: st, Plan: plan, CPUs: o.cpus, Accel: o.accel, QEMU: o.qemu, CPU: o.cpu, Timeout: o.timeout/maxAttempts - 2*time.Minute, Log: log})
	if out != nil {
		rep.HostKernel, rep.HostKVM, rep.WallS, rep.Steps = out.Result.Kernel, out.Result.KVM, out.Wall.Seconds(), out.Result.Steps
	}
	if err != nil {
		rep.problem("%v", err)
		if strings.Contains(err.Error(), "no result from the emulated host") {
			return "the emulated host died (no result, QEMU exited by itself)"
		}
		return ""
	}
	if !strings.HasPrefix(out.Result.KVM, "true") {
		rep.problem("the emulated host has no hardware virtualization: %s", out.Result.KVM)
	}
	for _, s := range out.Result.Steps {
		if s.ExitCode != 0 {
			rep.problem("step %s: exit code %d %s (see %s/%s.err)", s.Name, s.ExitCode, s.Error, out.OutDir, s.Name)
		}
	}
	if len(out.Result.Steps) != len(plan.Steps) {
		rep.problem("%d of %d steps ran", len(out.Result.Steps), len(plan.Steps))
	}
	if raw, err := out.Output("gated"); err == nil {
		rep.Measured = measured(raw)
	}
	var crash string
	if rep.Tests, crash, err = countTests(ctx, out, re); err != nil {
		rep.problem("%v", err)
	} else if err := rep.Tests.Check(o.min); err != nil {
		rep.problem("%v", err)
	}
	explained := crash != "" || len(rep.Tests.Failed) == 0
	if o.explore {
		for _, step := range []string{"explore-kvm", "sweep-kvm"} {
			if stepFailed(out, step) {
				// The same signatures as a gated test's: a triple fault,
				// or a guest that never wrote a byte on its console (seen
				// 2026-12-02 in the sweep step's boot, after the first
				// attempt's host had died by itself).
				b, _ := os.ReadFile(filepath.Join(out.OutDir, step+".err"))
				if !crashed(string(b)) {
					explained = false
				} else if crash == "" {
					crash = step + ": the guest triple-faulted or never booted"
				}
			}
		}
		n := len(rep.Problems)
		compareExplore(ctx, rep, o, out, themisctl)
		compareSweep(ctx, rep, out, themisctl)
		stalled := stalledExplore(rep.ExploreKVM)
		if stalled != "" && crash == "" {
			crash = stalled
		}
		if len(rep.Problems) > n && !stepFailed(out, "explore-kvm") && !stepFailed(out, "sweep-kvm") && stalled == "" {
			explained = false // a difference between backends is never the emulator's
		}
	}
	if !explained {
		return ""
	}
	return crash
}

func stepFailed(out *nested.Outcome, name string) bool {
	for _, s := range out.Result.Steps {
		if s.Name == name {
			return s.ExitCode != 0
		}
	}
	return true
}

// keepAttempt moves an attempt's console and outputs aside for the report.
func keepAttempt(work string, attempt int) error {
	for _, f := range []string{"console.log", "out"} {
		if err := os.Rename(filepath.Join(work, f), filepath.Join(work, fmt.Sprintf("%s.attempt%d", f, attempt))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// maxAttempts bounds the runs of the job when each ends by the emulated
// host's own crash: on 2026-12-01 it crashed twice in a row once in seven
// CI runs (QEMU exited by itself; then a soft lockup in its kernel during
// a synthetic-guest test that had passed in every other run).
const maxAttempts = 3

// tripleFault is how a guest's triple fault reads in our errors
// (kvm.ExitError for SHUTDOWN; on SVM the VMCB is reset, hence the RIP).
const tripleFault = "SHUTDOWN at RIP 0xfff0: triple fault"

// silentBoot is how a fresh guest that never got through its early kernel
// init in the emulated host reads: the boot timed out and the guest wrote
// nothing at all on its console (seen 2026-12-01 once in a run whose other
// seven boots came up in 10 s; the emulated host's kernel did not even log
// the guest's early perf MSR write that every other boot makes). A boot
// that prints anything and then stops is not this.
var silentBoot = []string{`no "themis-agent: ready" on the console`, "(no console output)"}

// crashed says whether a failed test's output reads as the emulated host's
// own crash: a triple fault, or a silent boot.
func crashed(output string) bool {
	if strings.Contains(output, tripleFault) {
		return true
	}
	for _, s := range silentBoot {
		if !strings.Contains(output, s) {
			return false
		}
	}
	return true
}

// stallSignature is how the emulated host's guest crash reads when the
// agent call times out before the triple fault (docs/kvm.md): the vCPU
// stands with an exception both injected and pending, the #PF that TCG's
// nested SVM delivers in the guest's COM2 interrupt path.
const stallSignature = "exception injected 1 pending 1"

// stalledExplore describes an explore run on kvm that stopped because its
// guest went silent with the emulated host's crash signature, every finding
// a guest-died one that reads so; "" for anything else (a difference
// between backends with a live guest is never the emulator's).
func stalledExplore(k *exploreSummary) string {
	if k == nil || k.Stopped != "guest-died" || len(k.FindingList) == 0 {
		return ""
	}
	for _, f := range k.FindingList {
		if f.Kind != "guest-died" || !strings.Contains(f.Detail, "i/o timeout") || !strings.Contains(f.Detail, stallSignature) {
			return ""
		}
	}
	return "explore-kvm: the guest went silent with an exception injected and pending"
}

// measuredMark starts a gated test's log line worth reporting.
const measuredMark = "replay fidelity:"

// measured returns the log lines of the gated output that carry
// measuredMark, trimmed, at most 32 of them.
func measured(raw []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && len(out) < 32 {
		if line := strings.TrimSpace(sc.Text()); strings.Contains(line, measuredMark) {
			out = append(out, line)
		}
	}
	return out
}

// countTests turns the test binary's -test.v=test2json output into go test
// -json events (go tool test2json) and counts the matching tests.
func countTests(ctx context.Context, out *nested.Outcome, re *regexp.Regexp) (testcount.Result, string, error) {
	raw, err := out.Output("gated")
	if err != nil {
		return testcount.Result{}, "", err
	}
	goBin, err := guest.GoTool()
	if err != nil {
		return testcount.Result{}, "", err
	}
	cmd := exec.CommandContext(ctx, goBin, "tool", "test2json", "-t", "-p", "github.com/themisfs/themis/vmm/kvm")
	cmd.Stdin = bytes.NewReader(raw)
	var js bytes.Buffer
	cmd.Stdout = &js
	if err := cmd.Run(); err != nil {
		return testcount.Result{}, "", fmt.Errorf("go tool test2json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out.OutDir, "gated.json"), js.Bytes(), 0o644); err != nil {
		return testcount.Result{}, "", err
	}
	res, err := testcount.Count(bytes.NewReader(js.Bytes()), re)
	if err != nil {
		return res, "", err
	}
	return res, crashedTests(js.Bytes()), nil
}

// crashedTests says which failed tests failed by the emulated host's own
// crash (crashed: a triple fault, a silent boot), when every failed test
// that has no failed subtest did; else "".
func crashedTests(events []byte) string {
	outputs := map[string]*strings.Builder{}
	var failed []string
	sc := bufio.NewScanner(bytes.NewReader(events))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
			continue
		}
		if outputs[e.Test] == nil {
			outputs[e.Test] = &strings.Builder{}
		}
		outputs[e.Test].WriteString(e.Output)
		if e.Action == "fail" {
			failed = append(failed, e.Test)
		}
	}
	var leaves []string
	for _, f := range failed {
		leaf := true
		for _, g := range failed {
			if strings.HasPrefix(g, f+"/") {
				leaf = false
			}
		}
		if !leaf {
			continue
		}
		if !crashed(outputs[f].String()) {
			return ""
		}
		leaves = append(leaves, f)
	}
	if len(leaves) == 0 {
		return ""
	}
	return "the guest triple-faulted or never booted in " + strings.Join(leaves, ", ")
}

// compareExplore runs the same explore here on the QEMU backend and
// compares digest and unique states with the KVM run there.
func compareExplore(ctx context.Context, rep *report, o options, out *nested.Outcome, themisctl string) {
	kvmOut, err := out.Output("explore-kvm")
	if err != nil {
		rep.problem("explore on kvm: %v", err)
		return
	}
	if rep.ExploreKVM, err = parseExplore(kvmOut); err != nil {
		rep.problem("explore on kvm: %v", err)
		return
	}
	qemuOut, err := runHere(ctx, themisctl, append([]string{"--json", "explore", "--backend", "qemu"}, strings.Fields(o.exploreArgs)...)...)
	if err != nil {
		rep.problem("explore on qemu here: %v", err)
		return
	}
	if rep.ExploreQEMU, err = parseExplore(qemuOut); err != nil {
		rep.problem("explore on qemu here: %v", err)
		return
	}
	k, q := rep.ExploreKVM, rep.ExploreQEMU
	switch {
	case k.Backend != "kvm":
		rep.problem("explore there ran on backend %q, want kvm", k.Backend)
	// Not the states count: with several workers a state first reached
	// deep may be expanded again when reached shallower, as timing has it
	// (explore.NewParallelChecker); the set of states and the findings
	// do not depend on it.
	case k.Digest != q.Digest || k.UniqueStates != q.UniqueStates || k.Findings != q.Findings:
		rep.problem("explore differs between backends: kvm digest %s, %d states, %d unique, %d findings; qemu digest %s, %d states, %d unique, %d findings",
			k.Digest, k.States, k.UniqueStates, k.Findings, q.Digest, q.States, q.UniqueStates, q.Findings)
	}
}

func parseExplore(b []byte) (*exploreSummary, error) {
	var s exploreSummary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("explore --json output: %w", err)
	}
	if s.Digest == "" {
		return nil, errors.New("explore --json output has no digest")
	}
	return &s, nil
}

// compareSweep runs the sweep here on QEMU and compares every cell.
func compareSweep(ctx context.Context, rep *report, out *nested.Outcome, themisctl string) {
	kvmOut, err := out.Output("sweep-kvm")
	if err != nil {
		rep.problem("sweep on kvm: %v", err)
		return
	}
	qemuOut, err := runHere(ctx, themisctl, append(append([]string{"--json"}, sweepArgs...), "--backend", "qemu")...)
	if err != nil {
		rep.problem("sweep on qemu here: %v", err)
		return
	}
	k, err := sweepCells(kvmOut)
	if err != nil {
		rep.problem("sweep on kvm: %v", err)
		return
	}
	q, err := sweepCells(qemuOut)
	if err != nil {
		rep.problem("sweep on qemu: %v", err)
		return
	}
	rep.SweepRows = len(k)
	if len(k) == 0 {
		rep.problem("the sweep on kvm returned no cells")
	}
	rep.SweepDiffers = diffLines(k, q)
	if len(rep.SweepDiffers) > 0 {
		rep.problem("the clock sweep differs between backends in %d cells", len(rep.SweepDiffers))
	}
}

// sweepCells returns the sweep's JSON lines in a canonical form (keys
// sorted by encoding/json), sorted.
func sweepCells(b []byte) ([]string, error) {
	var cells []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("sweep --json line: %w", err)
		}
		c, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		cells = append(cells, string(c))
	}
	sort.Strings(cells)
	return cells, sc.Err()
}

// diffLines lists the lines of a missing from b (-) and of b missing from a (+).
func diffLines(a, b []string) []string {
	in := func(l []string) map[string]bool {
		m := map[string]bool{}
		for _, s := range l {
			m[s] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var d []string
	for _, s := range a {
		if !inb[s] {
			d = append(d, "kvm only: "+s)
		}
	}
	for _, s := range b {
		if !ina[s] {
			d = append(d, "qemu only: "+s)
		}
	}
	return d
}

// runHere runs themisctl on this host (an in-process daemon of its own).
func runHere(ctx context.Context, themisctl string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, themisctl, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "THEMIS_SOCKET="+filepath.Join(os.TempDir(), fmt.Sprintf("themis-nested-%d.sock", os.Getpid())))
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("themisctl %s: %w: %s", strings.Join(args, " "), err, nested.LastLines(stderr.String(), 10))
	}
	return b, nil
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "emulated AMD-V host: kernel %s, kvm %s, %.0f s boot to power off\n", r.HostKernel, r.HostKVM, r.WallS)
	for _, s := range r.Steps {
		fmt.Fprintf(w, "  step %-12s exit %d  %.1f s %s\n", s.Name, s.ExitCode, s.Seconds, s.Error)
	}
	fmt.Fprintf(w, "gated tests: %d ran (%d passed, %d failed), %d skipped\n", r.Tests.Ran(), len(r.Tests.Passed), len(r.Tests.Failed), len(r.Tests.Skipped))
	for _, n := range r.Tests.Passed {
		fmt.Fprintln(w, "  pass", n)
	}
	for _, n := range r.Tests.Failed {
		fmt.Fprintln(w, "  FAIL", n)
	}
	for _, e := range []*exploreSummary{r.ExploreKVM, r.ExploreQEMU} {
		if e != nil {
			fmt.Fprintf(w, "explore on %-4s %d states, %d unique, %d findings, digest %s, %.2f states/s (op %.2f s, fingerprint %.2f s, restore %.2f s)\n",
				e.Backend, e.States, e.UniqueStates, e.Findings, e.Digest, e.StatesPerSec, e.OpS, e.FingerprintS, e.RestoreS)
		}
	}
	if r.SweepRows > 0 {
		fmt.Fprintf(w, "clock sweep: %d cells on kvm, %d differ from qemu\n", r.SweepRows, len(r.SweepDiffers))
	}
	for _, d := range r.SweepDiffers {
		fmt.Fprintln(w, "  ", d)
	}
	for _, m := range r.Measured {
		fmt.Fprintln(w, "measured on kvm:", m)
	}
	for _, a := range r.Retried {
		fmt.Fprintln(w, "RETRIED after the emulated host's own crash (docs/kvm.md):", a)
	}
	for _, p := range r.Problems {
		fmt.Fprintln(w, "PROBLEM:", p)
	}
	if r.WorkDir != "" {
		fmt.Fprintln(w, "work directory:", r.WorkDir)
	}
}
