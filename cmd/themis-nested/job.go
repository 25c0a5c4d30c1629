package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/nested"
	"github.com/themisfs/themis/internal/testcount"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
)

type options struct {
	work, run        string
	exploreArgs      string
	genericArgs      string // explore's arguments for the generic flavour's unit
	generic          bool   // run it (with explore)
	cpus             int
	accel, qemu, cpu string
	inject           string
	cycles           bool
	explore, json    bool
	pin              bool
	timeout          time.Duration
}

// Faults -inject-fault makes, to prove that the job fails on them at once
// (docs/kvm.md): injectRestore makes every restore of the vmm/kvm test
// binary's Linux machines fail the verify gate (nested.FaultEnv, honoured
// by that test build alone); injectDigest changes the digest of explore on
// kvm before it is compared with QEMU's.
const (
	injectRestore = "restore"
	injectDigest  = "digest"
)

// sweepArgs is the clock sweep run on the KVM backend there and the QEMU
// backend here: the Y2038 pair on an ext2 (-I 128) lane.
var sweepArgs = []string{"sweep", "clock", "--fs", "ext2", "--values", "2147483647,2147483648", "--ops", "create,touch"}

// report is what the job found.
type report struct {
	WorkDir       string       `json:"work_dir"`
	HostKernel    string       `json:"host_kernel"`
	HostKVM       string       `json:"host_kvm"`
	WallS         float64      `json:"wall_s"` // the emulated host, boot to power off, all boots
	InjectedFault string       `json:"injected_fault,omitempty"`
	Boots         []bootReport `json:"boots"`
	// Units are the job's tests and runs with their attempts and verdicts.
	Units []unitReport `json:"units"`
	// Retried names each attempt that ended with an emulator signature and
	// was run again: "TEST attempt N: SIGNATURE: evidence".
	Retried []string `json:"retried,omitempty"`
	// Inconclusive are the tests outside the must-pass core whose every
	// attempt ended with an emulator signature: they do not fail the job.
	Inconclusive []string         `json:"inconclusive,omitempty"`
	Tests        testcount.Result `json:"tests"` // the gated tests' last attempts, counted
	ExploreKVM   *exploreSummary  `json:"explore_kvm,omitempty"`
	ExploreQEMU  *exploreSummary  `json:"explore_qemu,omitempty"`
	// GenericKVM and GenericQEMU are explore on a lane only the generic
	// kernel flavour serves (-generic-args), there and here.
	GenericKVM   *exploreSummary     `json:"explore_generic_kvm,omitempty"`
	GenericQEMU  *exploreSummary     `json:"explore_generic_qemu,omitempty"`
	SweepRows    int                 `json:"sweep_rows"`
	SweepDiffers []string            `json:"sweep_differs,omitempty"`
	Steps        []nested.StepResult `json:"steps"` // the last boot's
	// Measured are the gated tests' measurement lines (measuredMark), as
	// the tests logged them: the KVM backend's replay fidelity.
	Measured []string `json:"measured,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// bootReport is one boot of the emulated host.
type bootReport struct {
	Boot    int     `json:"boot"`
	WallS   float64 `json:"wall_s"`
	End     string  `json:"end"` // "powered off", or why it ended before its plan did
	Console string  `json:"console"`
	OutDir  string  `json:"out_dir"`
	Units   int     `json:"units"` // how many units its plan ran
}

// unitReport is one unit's verdict and attempts.
type unitReport struct {
	Name     string           `json:"name"`
	MustPass bool             `json:"must_pass"`
	Verdict  nested.Verdict   `json:"verdict"` // "retry" when the job failed before it had one
	Attempts []nested.Attempt `json:"attempts"`
}

// exploreSummary is the part of explore's --json output compared.
type exploreSummary struct {
	Backend      string          `json:"backend"`
	States       int64           `json:"states"`
	UniqueStates int64           `json:"unique_states"`
	Findings     int64           `json:"findings"`
	Digest       string          `json:"digest"`
	StatesPerSec float64         `json:"states_per_sec"`
	ElapsedS     float64         `json:"elapsed_s"`
	OpS          float64         `json:"op_s"`
	FingerprintS float64         `json:"fingerprint_s"`
	RestoreS     float64         `json:"restore_s"`
	Stopped      string          `json:"stopped"`
	FindingList  []nestedFinding `json:"finding_list"`
}

// nestedFinding is a finding of the explore compared: its kind and detail.
type nestedFinding struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

func (r *report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// job is one run of the gated job: what every boot shares.
type job struct {
	o         options
	log       *zap.Logger
	rep       *report
	cache     string
	host      *guest.Image
	stage     *nested.Stage
	env       []string
	themisctl string
	qemuSweep []string            // the sweep's cells on QEMU here, once run
	testJSON  map[string][]byte   // each gated test's last attempt, go test -json
	measured  map[string][]string // each gated test's last attempt's measurement lines
}

func run(ctx context.Context, o options, log *zap.Logger) (*report, error) {
	if o.inject != "" && o.inject != injectRestore && o.inject != injectDigest {
		return nil, fmt.Errorf("-inject-fault %q: want %s or %s", o.inject, injectRestore, injectDigest)
	}
	us, err := selectUnits(o)
	if err != nil {
		return nil, err
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
	rep := &report{WorkDir: o.work, InjectedFault: o.inject}
	j, err := setup(ctx, o, log, rep)
	if err != nil {
		return rep, err
	}
	l, err := schedule(ctx, us, j.boot)
	j.conclude(l)
	if err != nil {
		rep.problem("%v", err)
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

// setup builds the binaries, finds the images and stages the job's root.
func setup(ctx context.Context, o options, log *zap.Logger, rep *report) (*job, error) {
	j := &job{o: o, log: log, rep: rep, testJSON: map[string][]byte{}, measured: map[string][]string{}}
	bins := filepath.Join(o.work, "bin")
	log.Info("building static binaries", zap.String("dir", bins))
	if err := guest.BuildStatic(ctx, "./vmm/kvm", filepath.Join(bins, "kvm.test"), true); err != nil {
		return nil, err
	}
	j.themisctl = filepath.Join(bins, "themisctl")
	if err := guest.BuildStatic(ctx, "./cmd/themisctl", j.themisctl, false); err != nil {
		return nil, err
	}
	var err error
	if j.cache, err = guest.DefaultCacheDir(); err != nil {
		return nil, err
	}
	imgs, err := guestImages(ctx, o, j.cache, log)
	if err != nil {
		return nil, err
	}
	if j.host, err = nested.BuildHost(ctx, j.cache, log); err != nil {
		return nil, err
	}
	if j.stage, err = nested.NewStage(filepath.Join(o.work, "root")); err != nil {
		return nil, err
	}
	j.env, err = nested.StageProject(j.stage, imgs, map[string]string{"kvm.test": filepath.Join(bins, "kvm.test"), "themisctl": j.themisctl})
	return j, err
}

// guestImages builds (or finds in the cache) the guest images the job
// stages: the cloud flavour's, and the generic flavour's when its explore
// runs (.ci/run builds both before).
func guestImages(ctx context.Context, o options, cache string, log *zap.Logger) ([]*guest.Image, error) {
	flavors := []string{guest.FlavorCloud}
	if o.explore && o.generic {
		flavors = append(flavors, guest.FlavorGeneric)
	}
	var imgs []*guest.Image
	for _, f := range flavors {
		img, err := guest.Build(ctx, guest.Options{CacheDir: cache, Flavor: f, Log: log})
		if err != nil {
			return nil, fmt.Errorf("guest image, %s flavour: %w", f, err)
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// Each gated test's step: the test binary's own timeout, and the step's a
// minute more. Signatures end an attempt long before either (Watcher).
const (
	testTimeout = 7 * time.Minute
	runTimeout  = 6 * time.Minute // explore and the sweep there
	bootSlack   = 4 * time.Minute // the host's boot, module loads, power off
	hereReserve = 5 * time.Minute // the QEMU runs here, after a boot
)

// jobPlan is one boot's plan: a step per unit, in order.
func jobPlan(o options, env []string, us []unit) nested.Plan {
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
	var plan nested.Plan
	for _, u := range us {
		var s nested.Step
		switch {
		case u.Test:
			env := withEnv("THEMIS_REQUIRE_KVM=1", "THEMIS_CYCLES_VERIFY="+os.Getenv("THEMIS_CYCLES_VERIFY"), "THEMIS_CYCLES_NORESTORE="+os.Getenv("THEMIS_CYCLES_NORESTORE"))
			if o.inject == injectRestore {
				env = append(env, nested.FaultEnv+"="+injectRestore)
			}
			s = nested.Step{Argv: argv("kvm.test", "-test.v=test2json", "-test.count=1", "-test.timeout="+testTimeout.String(), "-test.run", testRunPattern(u.Name)),
				Env: env, Timeout: nested.Duration(testTimeout + time.Minute)}
		case u.Name == exploreUnit || u.Name == genericUnit:
			args, _ := exploreArgsOf(o, u.Name)
			s = nested.Step{Argv: argv("themisctl", append([]string{"--json", "explore", "--backend", vmm.BackendKVM}, strings.Fields(args)...)...),
				Env: withEnv(), Timeout: nested.Duration(runTimeout)}
		default:
			s = nested.Step{Argv: argv("themisctl", append(append([]string{"--json"}, sweepArgs...), "--backend", vmm.BackendKVM)...),
				Env: withEnv(), Timeout: nested.Duration(runTimeout)}
		}
		s.Name = u.Step
		plan.Steps = append(plan.Steps, s)
	}
	return plan
}

// bootTimeout is a boot's limit: its steps' timeouts and the host's own
// time, within what is left of the job less the runs here.
func bootTimeout(ctx context.Context, plan nested.Plan) time.Duration {
	t := bootSlack
	for _, s := range plan.Steps {
		t += time.Duration(s.Timeout)
	}
	if dl, ok := ctx.Deadline(); ok {
		t = min(t, max(time.Until(dl)-hereReserve, bootSlack))
	}
	return t
}

// boot is the job's booter: one boot of the emulated host running us.
func (j *job) boot(ctx context.Context, n int, us []unit) (map[string]nested.Attempt, error) {
	plan := jobPlan(j.o, j.env, us)
	o := j.o
	out, err := nested.Run(ctx, nested.Options{CacheDir: j.cache, WorkDir: o.work, Stage: j.stage, Plan: plan, CPUs: o.cpus, Accel: o.accel,
		QEMU: o.qemu, CPU: o.cpu, Timeout: bootTimeout(ctx, plan), Host: j.host, Log: j.log})
	if err != nil {
		return nil, fmt.Errorf("boot %d: %w", n, err)
	}
	j.rep.HostKernel, j.rep.HostKVM, j.rep.Steps = out.Result.Kernel, out.Result.KVM, out.Result.Steps
	j.rep.WallS += out.Wall.Seconds()
	if len(out.Result.Steps) > 0 && !strings.HasPrefix(out.Result.KVM, "true") {
		return nil, fmt.Errorf("boot %d: the emulated host has no hardware virtualization: %s", n, out.Result.KVM)
	}
	results := map[string]nested.StepResult{}
	for _, r := range out.Result.Steps {
		results[r.Name] = r
	}
	got := map[string]nested.Attempt{}
	for _, u := range us {
		r, ok := results[u.Step]
		var a nested.Attempt
		switch {
		case ok:
			if a, err = j.attempt(ctx, out, u, r); err != nil {
				return nil, err
			}
		case out.Running == u.Step:
			a = ended(out)
		default:
			continue // it did not get to run
		}
		got[u.Name] = a
		if a.Signature != nested.None {
			j.log.Warn("an attempt ended with an emulator signature", zap.String("test", u.Name), zap.Int("boot", n),
				zap.String("signature", a.Signature.String()), zap.String("evidence", a.Detail))
		}
	}
	br := bootReport{Boot: n, WallS: out.Wall.Seconds(), End: endOf(out), Units: len(us),
		Console: filepath.Join(o.work, fmt.Sprintf("console.boot%d.log", n)), OutDir: filepath.Join(o.work, fmt.Sprintf("out.boot%d", n))}
	j.rep.Boots = append(j.rep.Boots, br)
	if err := os.Rename(out.Console, br.Console); err != nil {
		return nil, err
	}
	if err := os.Rename(out.OutDir, br.OutDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return got, nil
}

// ended is the attempt of the step running when the emulated host's run
// ended without its result.
func ended(out *nested.Outcome) nested.Attempt {
	switch {
	case out.Stopped != nil:
		return nested.Attempt{Signature: out.Stopped.Signature, Detail: "stopped: " + out.Stopped.Line}
	case out.Exited != "":
		return nested.Attempt{Signature: nested.HostDied, Detail: "the emulated host died: " + out.Exited}
	default: // timed out with no signature on its console: not the emulator's, by the rule
		return nested.Attempt{Detail: "the emulated host did not power off within its timeout, with no signature on its console"}
	}
}

func endOf(out *nested.Outcome) string {
	switch {
	case out.Stopped != nil:
		return fmt.Sprintf("stopped in step %q: %s: %s", out.Stopped.Step, out.Stopped.Signature, out.Stopped.Line)
	case out.Exited != "":
		return "died: " + out.Exited
	case out.TimedOut:
		return "timed out"
	}
	return "powered off"
}

// attempt judges a unit's step that has a result: passed, failed with an
// emulator signature (nested.Evidence over the console while it ran and
// its output), or failed without one. An error is the job's own.
func (j *job) attempt(ctx context.Context, out *nested.Outcome, u unit, r nested.StepResult) (nested.Attempt, error) {
	a := nested.Attempt{Seconds: r.Seconds}
	stdout, _ := out.Output(u.Step) // a step killed early may have written nothing
	stderr, _ := os.ReadFile(filepath.Join(out.OutDir, u.Step+".err"))
	var ran bool // the step itself succeeded: a failure now is a comparison's, never the emulator's
	var why string
	var err error
	switch {
	case u.Test:
		ran, why, err = j.judgeTest(ctx, out, u, r, stdout)
		a.Passed = ran && why == ""
	case r.ExitCode != 0:
		why = fmt.Sprintf("exit code %d %s: %s", r.ExitCode, r.Error, nested.LastLines(string(bytes.TrimSpace(stderr)), 3))
	case u.Name == exploreUnit || u.Name == genericUnit:
		ran = true
		why, err = j.compareExplore(ctx, u.Name, stdout)
	default:
		ran = true
		why, err = j.compareSweep(ctx, stdout)
	}
	if err != nil {
		return a, err
	}
	if why == "" {
		a.Passed = true
		return a, nil
	}
	a.Detail = why
	if !ran {
		if sig, ev := nested.Evidence(out.StepConsole(u.Step), append(stdout, stderr...)); sig != nested.None {
			a.Signature, a.Detail = sig, ev
		}
	}
	return a, nil
}

// judgeTest: the step's go test -json (kept as <step>.json) must show the
// unit's test passed, not skipped. ran is false when the test failed.
func (j *job) judgeTest(ctx context.Context, out *nested.Outcome, u unit, r nested.StepResult, stdout []byte) (ran bool, why string, err error) {
	js, err := toJSON(ctx, stdout)
	if err != nil {
		return false, "", err
	}
	if err := os.WriteFile(filepath.Join(out.OutDir, u.Step+".json"), js, 0o644); err != nil {
		return false, "", err
	}
	j.testJSON[u.Name], j.measured[u.Name] = js, measured(stdout)
	res, err := testcount.Count(bytes.NewReader(js), regexp.MustCompile("^"+regexp.QuoteMeta(u.Name)+"$"))
	if err != nil {
		return false, "", err
	}
	switch {
	case r.ExitCode == 0 && len(res.Passed) > 0:
		return true, "", nil
	case len(res.Skipped) > 0 && len(res.Failed) == 0:
		return true, "skipped: " + firstLogLines(stdout), nil
	case r.ExitCode == 0 && res.Ran() == 0:
		return true, "the test did not run (renamed?)", nil
	}
	return false, fmt.Sprintf("exit code %d %s: %s", r.ExitCode, r.Error, firstLogLines(stdout)), nil
}

// logLine is a test's t.Error/t.Fatal/t.Log line in -test.v output.
var logLine = regexp.MustCompile(`^\s+\w+\.go:\d+: `)

// firstLogLines returns a test output's first two log lines, cut short.
func firstLogLines(out []byte) string {
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if logLine.MatchString(l) {
			l = strings.TrimSpace(l)
			if len(l) > 300 {
				l = l[:300] + "…"
			}
			if got = append(got, l); len(got) == 2 {
				break
			}
		}
	}
	if len(got) == 0 {
		return nested.LastLines(string(bytes.TrimSpace(out)), 2)
	}
	return strings.Join(got, " | ")
}

// toJSON turns the test binary's -test.v=test2json output into go test
// -json events (go tool test2json).
func toJSON(ctx context.Context, raw []byte) ([]byte, error) {
	goBin, err := guest.GoTool()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, goBin, "tool", "test2json", "-t", "-p", "github.com/themisfs/themis/vmm/kvm")
	cmd.Stdin = bytes.NewReader(raw)
	var js bytes.Buffer
	cmd.Stdout = &js
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go tool test2json: %w", err)
	}
	return js.Bytes(), nil
}

// conclude writes the verdicts into the report: a problem for each unit
// that failed, the retried attempts, the inconclusive tests, and the
// gated tests' last attempts counted.
func (j *job) conclude(l *ledger) {
	rep := j.rep
	var all bytes.Buffer
	for _, u := range l.units {
		as := l.attempts[u.Name]
		v := l.verdict(u)
		rep.Units = append(rep.Units, unitReport{Name: u.Name, MustPass: u.MustPass, Verdict: v, Attempts: as})
		for i, a := range as {
			if a.Signature != nested.None && (i < len(as)-1 || v == nested.Retry) {
				rep.Retried = append(rep.Retried, fmt.Sprintf("%s attempt %d: %s: %s", u.Name, i+1, a.Signature, a.Detail))
			}
		}
		switch v {
		case nested.Fail:
			last := as[len(as)-1]
			if last.Signature != nested.None {
				rep.problem("%s (must pass): every one of %d attempts ended with an emulator signature, the last %s: %s", u.Name, len(as), last.Signature, last.Detail)
			} else {
				rep.problem("%s failed (attempt %d, no emulator signature: not retried): %s", u.Name, len(as), last.Detail)
			}
		case nested.Inconclusive:
			rep.Inconclusive = append(rep.Inconclusive, fmt.Sprintf("%s: %d attempts, each ended with an emulator signature, the last %s: %s", u.Name, len(as), as[len(as)-1].Signature, as[len(as)-1].Detail))
			j.log.Warn("inconclusive: every attempt ended with an emulator signature", zap.String("test", u.Name))
		}
		all.Write(j.testJSON[u.Name])
		rep.Measured = append(rep.Measured, j.measured[u.Name]...)
	}
	rep.Tests, _ = testcount.Count(&all, regexp.MustCompile("."))
	rep.Tests.Passed, rep.Tests.Failed, rep.Tests.Skipped = slices.Compact(rep.Tests.Passed), slices.Compact(rep.Tests.Failed), slices.Compact(rep.Tests.Skipped)
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

// compareExplore compares explore on kvm there (unit's --json output)
// with the same explore on the QEMU backend here, run once: digest, unique
// states and findings must be equal. A difference is returned as why;
// an error is a failure here.
func (j *job) compareExplore(ctx context.Context, unit string, kvmOut []byte) (string, error) {
	args, _ := exploreArgsOf(j.o, unit)
	kvmRes, qemuRes := &j.rep.ExploreKVM, &j.rep.ExploreQEMU
	if unit == genericUnit {
		kvmRes, qemuRes = &j.rep.GenericKVM, &j.rep.GenericQEMU
	}
	k, err := parseExplore(kvmOut)
	if err != nil {
		return "explore on kvm: " + err.Error(), nil
	}
	if j.o.inject == injectDigest {
		k.Digest = "injected-fault-" + k.Digest
	}
	*kvmRes = k
	if *qemuRes == nil {
		qemuOut, err := runHere(ctx, j.themisctl, append([]string{"--json", "explore", "--backend", vmm.BackendQEMU}, strings.Fields(args)...)...)
		if err != nil {
			return "", fmt.Errorf("explore on qemu here: %w", err)
		}
		if *qemuRes, err = parseExplore(qemuOut); err != nil {
			return "", fmt.Errorf("explore on qemu here: %w", err)
		}
	}
	q := *qemuRes
	switch {
	case k.Backend != vmm.BackendKVM:
		return fmt.Sprintf("explore there ran on backend %q, want kvm", k.Backend), nil
	// Not the states count: with several workers a state first reached
	// deep may be expanded again when reached shallower, as timing has it
	// (explore.NewParallelChecker); the set of states and the findings
	// do not depend on it.
	case k.Digest != q.Digest || k.UniqueStates != q.UniqueStates || k.Findings != q.Findings:
		return fmt.Sprintf("explore %s differs between backends: kvm digest %s, %d states, %d unique, %d findings; qemu digest %s, %d states, %d unique, %d findings",
			args, k.Digest, k.States, k.UniqueStates, k.Findings, q.Digest, q.States, q.UniqueStates, q.Findings), nil
	}
	return "", nil
}

// parseExplore reads explore's --json output (an ExploreResult) into the
// part compared.
func parseExplore(b []byte) (*exploreSummary, error) {
	var r themisv1.ExploreResult
	if err := jsonout.DecodeInto(b, &r); err != nil {
		return nil, fmt.Errorf("explore --json output: %w", err)
	}
	sum := r.GetSummary()
	if sum.GetDigest() == "" {
		return nil, errors.New("explore --json output has no digest")
	}
	s := &exploreSummary{Backend: sum.GetBackend(), States: sum.GetStates(), UniqueStates: sum.GetUniqueStates(), Findings: sum.GetFindings(),
		Digest: sum.GetDigest(), StatesPerSec: sum.GetStatesPerSec(), ElapsedS: sum.GetElapsedS(), OpS: sum.GetOpS(),
		FingerprintS: sum.GetFingerprintS(), RestoreS: sum.GetRestoreS(), Stopped: sum.GetStopped()}
	for _, f := range r.GetFindingList() {
		s.FindingList = append(s.FindingList, nestedFinding{Kind: f.GetKind(), Detail: f.GetDetail()})
	}
	return s, nil
}

// compareSweep compares the sweep's cells on kvm there with the same
// sweep on QEMU here, run once.
func (j *job) compareSweep(ctx context.Context, kvmOut []byte) (string, error) {
	k, err := sweepCells(kvmOut)
	if err != nil {
		return "sweep on kvm: " + err.Error(), nil
	}
	if j.qemuSweep == nil {
		qemuOut, err := runHere(ctx, j.themisctl, append(append([]string{"--json"}, sweepArgs...), "--backend", vmm.BackendQEMU)...)
		if err != nil {
			return "", fmt.Errorf("sweep on qemu here: %w", err)
		}
		if j.qemuSweep, err = sweepCells(qemuOut); err != nil {
			return "", fmt.Errorf("sweep on qemu here: %w", err)
		}
	}
	j.rep.SweepRows = len(k)
	j.rep.SweepDiffers = diffLines(k, j.qemuSweep)
	switch {
	case len(k) == 0:
		return "the sweep on kvm returned no cells", nil
	case len(j.rep.SweepDiffers) > 0:
		return fmt.Sprintf("the clock sweep differs between backends in %d cells", len(j.rep.SweepDiffers)), nil
	}
	return "", nil
}

// sweepCells reads what themisctl --json sweep clock prints (a
// themis.v1.SweepCell a line, api/jsonout) and returns the cells in one
// canonical form (jsonout's, on one line), sorted. No line is no cell.
func sweepCells(b []byte) ([]string, error) {
	msgs, err := jsonout.DecodeLines(b)
	if errors.Is(err, jsonout.ErrNotJSONLines) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep --json: %w", err)
	}
	var cells []string
	for i, m := range msgs {
		c, ok := m.(*themisv1.SweepCell)
		if !ok {
			return nil, fmt.Errorf("sweep --json: document %d is a %s, want a themis.v1.SweepCell", i+1, m.ProtoReflect().Descriptor().FullName())
		}
		line, err := jsonout.Encode(c, false)
		if err != nil {
			return nil, err
		}
		cells = append(cells, string(line))
	}
	sort.Strings(cells)
	return cells, nil
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
	fmt.Fprintf(w, "emulated AMD-V host: kernel %s, kvm %s, %.0f s booted in %d boots\n", r.HostKernel, r.HostKVM, r.WallS, len(r.Boots))
	for _, b := range r.Boots {
		fmt.Fprintf(w, "  boot %d: %d units, %.0f s, %s\n", b.Boot, b.Units, b.WallS, b.End)
	}
	if r.InjectedFault != "" {
		fmt.Fprintln(w, "INJECTED FAULT (the job must fail):", r.InjectedFault)
	}
	for _, u := range r.Units {
		core := ""
		if u.MustPass {
			core = " (must pass)"
		}
		fmt.Fprintf(w, "  %-12s %s%s, %d attempts\n", strings.ToUpper(u.Verdict.String()), u.Name, core, len(u.Attempts))
	}
	fmt.Fprintf(w, "gated tests (last attempts): %d ran (%d passed, %d failed), %d skipped\n", r.Tests.Ran(), len(r.Tests.Passed), len(r.Tests.Failed), len(r.Tests.Skipped))
	for _, e := range []struct {
		flavor string
		*exploreSummary
	}{{"", r.ExploreKVM}, {"", r.ExploreQEMU}, {" (generic flavour)", r.GenericKVM}, {" (generic flavour)", r.GenericQEMU}} {
		if e.exploreSummary != nil {
			fmt.Fprintf(w, "explore%s on %-4s %d states, %d unique, %d findings, digest %s, %.2f states/s (op %.2f s, fingerprint %.2f s, restore %.2f s)\n",
				e.flavor, e.Backend, e.States, e.UniqueStates, e.Findings, e.Digest, e.StatesPerSec, e.OpS, e.FingerprintS, e.RestoreS)
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
		fmt.Fprintln(w, "RETRIED after an emulator signature (docs/kvm.md):", a)
	}
	for _, a := range r.Inconclusive {
		fmt.Fprintln(w, "INCONCLUSIVE (every attempt ended with an emulator signature; does not fail the job):", a)
	}
	for _, p := range r.Problems {
		fmt.Fprintln(w, "PROBLEM:", p)
	}
	if r.WorkDir != "" {
		fmt.Fprintln(w, "work directory:", r.WorkDir)
	}
}
