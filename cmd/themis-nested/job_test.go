package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/api/jsonout"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/nested"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestSweepCellsCompare reads what themisctl --json sweep clock prints
// (a SweepCell a line, made by jsonout as the CLI makes it) and compares
// two sweeps cell by cell, whatever their order.
func TestSweepCellsCompare(t *testing.T) {
	lines := func(cells ...*themisv1.SweepCell) []byte {
		var b []byte
		for _, c := range cells {
			line, err := jsonout.Encode(c, false)
			if err != nil {
				t.Fatal(err)
			}
			b = append(append(b, line...), '\n')
		}
		return b
	}
	clamped := func(guest int64) *themisv1.SweepCell {
		return &themisv1.SweepCell{Lane: "ext2", Name: "2^31", Value: 2147483648, Op: "touch", Field: "mtime",
			Guest: &agentv1.Timespec{Sec: guest}, Verdict: "clamped(2147483647)"}
	}
	one := &themisv1.SweepCell{Lane: "ext2", Name: "one", Value: 1, Op: "touch", Field: "mtime", Verdict: "represented"}
	kvm := lines(clamped(2147483647), one)
	same := lines(one, clamped(2147483647))
	other := lines(one, clamped(2147483648))
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
	if len(k) != 2 || !strings.Contains(k[0], `"verdict":"`) {
		t.Errorf("sweepCells = %q", k)
	}
	for _, bad := range []string{"not json\n", `{"lane":"ext2","verdict":"represented"}` + "\n", // the shape before jsonout
		`{"schema":"themis.v1.SweepSummary","cells":"1"}` + "\n"} {
		if _, err := sweepCells([]byte(bad)); err == nil {
			t.Errorf("sweepCells(%s) accepted", bad)
		}
	}
	if c, err := sweepCells(nil); err != nil || len(c) != 0 {
		t.Errorf("sweepCells(nothing) = %q, %v; want no cell", c, err)
	}
}

// TestParseExplore reads what themisctl --json explore prints (an
// ExploreResult made by jsonout, as the CLI makes it).
func TestParseExplore(t *testing.T) {
	out, err := jsonout.Encode(&themisv1.ExploreResult{Summary: &themisv1.ExploreSummary{Backend: "kvm", States: 24, UniqueStates: 8, Digest: "a0b6"},
		FindingList: []*themisv1.Finding{{Kind: "errno-divergence", Detail: "mkdir"}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseExplore(out)
	if err != nil || s.Backend != "kvm" || s.UniqueStates != 8 || s.Digest != "a0b6" || len(s.FindingList) != 1 || s.FindingList[0].Kind != "errno-divergence" {
		t.Fatalf("parseExplore = %+v, %v", s, err)
	}
	for _, bad := range []string{`{"schema":"themis.v1.ExploreResult","summary":{"states":"1"}}`, `{`, `{"backend":"kvm","digest":"a0b6"}`} {
		if _, err := parseExplore([]byte(bad)); err == nil {
			t.Errorf("parseExplore(%s) accepted", bad)
		}
	}
}

func TestJobPlan(t *testing.T) {
	o := options{run: ".", exploreArgs: "--fs ext2 --seed 7", explore: true, pin: true, generic: true, genericArgs: "--fs minix --depth 1"}
	us, err := selectUnits(o)
	if err != nil {
		t.Fatal(err)
	}
	p := jobPlan(o, []string{"PATH=/bin"}, us)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range p.Steps {
		names = append(names, s.Name)
		if s.Argv[0] != "/usr/bin/taskset" {
			t.Errorf("step %s: argv %q, want it pinned with taskset", s.Name, s.Argv)
		}
		if s.Echo {
			t.Errorf("step %s echoes its output on the console watched for the host's signatures", s.Name)
		}
	}
	want := []string{"conf-bootandy2038", "conf-restoresoundness", "conf-nested", "conf-deletemiddlecheckpoint", "conf-staletranslatedcode",
		"conf-hungguestcleansup", "conf-failedrestorebreaks", "conf-replaypasses", "kvmlinuxrestorepages", "pitspeakerport",
		"restoreflushesguesttlb", "devicepathreverts", "failedbootreturnserror", "explore-kvm", "sweep-kvm", "explore-generic-kvm"}
	if !slices.Equal(names, want) {
		t.Errorf("steps %q, want %q", names, want)
	}
	if a := strings.Join(p.Steps[0].Argv, " "); !strings.HasSuffix(a, "-test.run ^TestKVMLinuxConformance$/^BootAndY2038$") {
		t.Errorf("first step: %s", a)
	}
	if a := strings.Join(p.Steps[len(p.Steps)-3].Argv, " "); !strings.Contains(a, "explore --backend kvm --fs ext2 --seed 7") {
		t.Errorf("explore step: %s", a)
	}
	if a := strings.Join(p.Steps[len(p.Steps)-1].Argv, " "); !strings.HasSuffix(a, "/bin-themis/themisctl --json explore --backend kvm --fs minix --depth 1") {
		t.Errorf("the generic flavour's explore step: %s", a)
	}
	o.explore, o.pin, o.run = false, false, "^TestPITSpeakerPort$"
	us, err = selectUnits(o)
	if err != nil {
		t.Fatal(err)
	}
	if p := jobPlan(o, nil, us); len(p.Steps) != 1 || p.Steps[0].Argv[0] != "/bin-themis/kvm.test" {
		t.Errorf("without explore or pin: %+v", p.Steps)
	}
	marker := nested.EmulatedEnv + "=1"
	if env := jobPlan(o, []string{marker}, us).Steps[0].Env; !slices.Contains(env, marker) || slices.Contains(env, nested.FaultEnv+"=restore") {
		t.Errorf("env %q: want %s (Cycles skips there) and no fault", env, marker)
	}
	o.cycles, o.inject = true, injectRestore
	if env := jobPlan(o, []string{marker}, us).Steps[0].Env; slices.Contains(env, marker) || !slices.Contains(env, nested.EmulatedEnv+"=cycles") || !slices.Contains(env, nested.FaultEnv+"=restore") {
		t.Errorf("with -cycles -inject-fault restore, env %q: want the marker changed so that Cycles runs, and the fault", env)
	}
	if _, err := selectUnits(options{run: "^TestNothing$"}); err == nil {
		t.Error("a -run that selects nothing was accepted")
	}
}

// TestGenericUnit: the generic flavour's explore runs with -explore and
// -generic, must pass, and only with --fs naming a lane that needs the
// generic kernel (else it would boot the cloud one).
func TestGenericUnit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		o       options
		want    bool   // the unit is selected
		wantErr string // "" for none
	}{
		{"minix", options{explore: true, generic: true, genericArgs: "--fs minix --depth 1"}, true, ""},
		{"--fs= form, with a cloud lane beside", options{explore: true, generic: true, genericArgs: "--depth 1 --fs=ext2,f2fs"}, true, ""},
		{"-generic=false", options{explore: true, genericArgs: "--fs minix"}, false, ""},
		{"-explore=false", options{generic: true, genericArgs: "--fs minix"}, false, ""},
		{"a cloud lane only", options{explore: true, generic: true, genericArgs: "--fs ext2 --depth 1"}, false, "boots the cloud flavour"},
		{"no --fs", options{explore: true, generic: true, genericArgs: "--depth 1"}, false, "want --fs"},
		{"a bad lane", options{explore: true, generic: true, genericArgs: "--fs nosuchfs"}, false, "-generic-args"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.run = "^TestPITSpeakerPort$"
			us, err := selectUnits(tt.o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("selectUnits = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(us, func(u unit) bool { return u.Name == genericUnit })
			if got := i >= 0; got != tt.want {
				t.Fatalf("units %+v: generic unit selected %v, want %v", us, got, tt.want)
			}
			if i >= 0 && (!us[i].MustPass || us[i].Test) {
				t.Errorf("generic unit %+v: want a must-pass themisctl run", us[i])
			}
		})
	}
}

// TestConformanceUnits: the job runs every subtest of the conformance
// suite as a step of its own, so its list must follow the suite's.
func TestConformanceUnits(t *testing.T) {
	if suite := vmmtest.SubtestNames(); !slices.Equal(suite, conformanceSuite) {
		t.Errorf("vmm/vmmtest runs %q, the nested job %q", suite, conformanceSuite)
	}
	for _, m := range []string{"TestKVMLinuxConformance/BootAndY2038", "TestKVMLinuxConformance/RestoreSoundness"} {
		if !mustPass[m] || !slices.Contains(conformanceSuite, strings.TrimPrefix(m, "TestKVMLinuxConformance/")) {
			t.Errorf("%s is not in the must-pass core", m)
		}
	}
}

func TestTestRunPattern(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"TestPITSpeakerPort", "^TestPITSpeakerPort$"},
		{"TestKVMLinuxConformance/BootAndY2038", "^TestKVMLinuxConformance$/^BootAndY2038$"},
	} {
		if got := testRunPattern(tt.name); got != tt.want {
			t.Errorf("testRunPattern(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// script is a fake booter: each unit's attempts in order, one per boot it
// is pending in; a nil entry means it did not get to run in that boot.
type script map[string][]*nested.Attempt

func (s script) booter(boots *int) booter {
	seen := map[string]int{}
	return func(_ context.Context, n int, us []unit) (map[string]nested.Attempt, error) {
		*boots = n
		got := map[string]nested.Attempt{}
		for _, u := range us {
			i := seen[u.Name]
			seen[u.Name]++
			if as := s[u.Name]; i < len(as) && as[i] != nil {
				got[u.Name] = *as[i]
			} else if i >= len(as) {
				got[u.Name] = nested.Attempt{Passed: true}
			}
		}
		return got, nil
	}
}

// TestSchedule is the rule over whole jobs (fake boots): a failure with no
// emulator signature, such as a restore that does not verify, fails the
// job after its one boot, with nothing retried; a signature retries that
// test alone; the must-pass core fails on three, any other test is
// inconclusive.
func TestSchedule(t *testing.T) {
	const (
		boot  = "TestKVMLinuxConformance/BootAndY2038"
		sound = "TestKVMLinuxConformance/RestoreSoundness"
		nest  = "TestKVMLinuxConformance/Nested"
	)
	us := []unit{{Name: boot, MustPass: true}, {Name: sound, MustPass: true}, {Name: nest}, {Name: exploreUnit, MustPass: true}}
	verify := &nested.Attempt{Detail: "restore 1: vmm: restore verification failed"}
	lock := &nested.Attempt{Signature: nested.SoftLockup}
	tf := &nested.Attempt{Signature: nested.TripleFaultBeforeReady}
	pass := &nested.Attempt{Passed: true}
	for _, tt := range []struct {
		name   string
		script script
		boots  int
		want   map[string]nested.Verdict
	}{
		{"all pass", script{}, 1, map[string]nested.Verdict{boot: nested.Pass, sound: nested.Pass, nest: nested.Pass}},
		{"restore does not verify: fails at once", script{sound: {verify}, nest: {lock}}, 1,
			map[string]nested.Verdict{sound: nested.Fail, nest: nested.Retry, boot: nested.Pass}},
		{"digest differs: fails at once", script{exploreUnit: {{Detail: "explore differs between backends"}}}, 1,
			map[string]nested.Verdict{exploreUnit: nested.Fail}},
		{"a soft lockup: that test again", script{nest: {lock, pass}}, 2, map[string]nested.Verdict{nest: nested.Pass, boot: nested.Pass}},
		{"then ours: fails", script{nest: {lock, verify}}, 2, map[string]nested.Verdict{nest: nested.Fail}},
		{"three signatures: inconclusive", script{nest: {lock, tf, lock}}, 3, map[string]nested.Verdict{nest: nested.Inconclusive, sound: nested.Pass}},
		{"three signatures, must pass: fails", script{boot: {tf, lock, tf}}, 3, map[string]nested.Verdict{boot: nested.Fail}},
		{"did not get to run: no attempt spent", script{nest: {nil, nil, lock, lock, pass}}, 5, map[string]nested.Verdict{nest: nested.Pass}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var boots int
			l, err := schedule(context.Background(), us, tt.script.booter(&boots))
			if err != nil {
				t.Fatal(err)
			}
			if boots != tt.boots {
				t.Errorf("%d boots, want %d", boots, tt.boots)
			}
			for _, u := range us {
				if want, ok := tt.want[u.Name]; ok && l.verdict(u) != want {
					t.Errorf("%s: %v after %d attempts, want %v", u.Name, l.verdict(u), len(l.attempts[u.Name]), want)
				}
			}
		})
	}
	never := func(context.Context, int, []unit) (map[string]nested.Attempt, error) { return nil, nil }
	if _, err := schedule(context.Background(), us, never); err == nil || !strings.Contains(err.Error(), "before running a step") {
		t.Errorf("a host that never runs a step: %v", err)
	}
}

// TestAttempt judges a step's real output: a restore that did not verify
// is a failure without a signature (the job's -inject-fault restore reads
// so); a triple fault at boot is the emulator's; a pass is a pass; a
// digest made to differ (-inject-fault digest) fails without one.
func TestAttempt(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("../../internal/nested/testdata/signatures", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sound := unit{Name: "TestKVMLinuxConformance/RestoreSoundness", Step: "conf-restoresoundness", MustPass: true, Test: true}
	bootU := unit{Name: "TestKVMLinuxConformance/BootAndY2038", Step: "conf-bootandy2038", MustPass: true, Test: true}
	passOut := []byte("=== RUN   TestKVMLinuxConformance\n=== RUN   TestKVMLinuxConformance/RestoreSoundness\n--- PASS: TestKVMLinuxConformance/RestoreSoundness (30.1s)\n--- PASS: TestKVMLinuxConformance (31.0s)\nPASS\n")
	skipOut := []byte("=== RUN   TestKVMLinuxConformance\n=== RUN   TestKVMLinuxConformance/RestoreSoundness\n    vmmtest.go:68: no kvm\n--- SKIP: TestKVMLinuxConformance/RestoreSoundness (0.0s)\n--- PASS: TestKVMLinuxConformance (0.1s)\nPASS\n")
	for _, tt := range []struct {
		name   string
		u      unit
		stdout []byte
		exit   int
		passed bool
		sig    nested.Signature
		detail string
	}{
		{"restore did not verify", sound, read("output-verify-failed.txt"), 1, false, nested.None, "restore verification failed"},
		{"triple fault at boot", bootU, read("output-triple-fault-boot.txt"), 1, false, nested.TripleFaultBeforeReady, "triple fault"},
		{"passed", sound, passOut, 0, true, nested.None, ""},
		{"skipped", sound, skipOut, 0, false, nested.None, "skipped"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tt.u.Step+".out"), tt.stdout, 0o644); err != nil {
				t.Fatal(err)
			}
			j := &job{rep: &report{}, testJSON: map[string][]byte{}, measured: map[string][]string{}}
			a, err := j.attempt(context.Background(), &nested.Outcome{OutDir: dir}, tt.u, nested.StepResult{Name: tt.u.Step, ExitCode: tt.exit})
			if err != nil {
				t.Fatal(err)
			}
			if a.Passed != tt.passed || a.Signature != tt.sig || !strings.Contains(a.Detail, tt.detail) {
				t.Errorf("attempt = %+v, want passed %v, signature %v, detail with %q", a, tt.passed, tt.sig, tt.detail)
			}
			if v := nested.Decide([]nested.Attempt{a}, tt.u.MustPass); tt.sig == nested.None && !tt.passed && v != nested.Fail {
				t.Errorf("verdict %v, want fail at once", v)
			}
		})
	}
	generic := unit{Name: genericUnit, Step: genericUnit, MustPass: true}
	for _, tt := range []struct {
		name   string
		digest string
		passed bool
	}{{"generic flavour, same digest", "6ea1135b2734", true}, {"generic flavour, the cloud explore's digest", "a0b6b21ad225", false}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := []byte(`{"schema":"themis.v1.ExploreResult","summary":{"backend":"kvm","states":"14","unique_states":"4","digest":"` + tt.digest + `"}}`)
			if err := os.WriteFile(filepath.Join(dir, genericUnit+".out"), out, 0o644); err != nil {
				t.Fatal(err)
			}
			// Each explore is compared with its own run here: the cloud
			// one's result must not stand in for the generic one's.
			j := &job{o: options{genericArgs: "--fs minix --depth 1"}, rep: &report{
				ExploreQEMU: &exploreSummary{Backend: "qemu", UniqueStates: 4, Digest: "a0b6b21ad225"},
				GenericQEMU: &exploreSummary{Backend: "qemu", UniqueStates: 4, Digest: "6ea1135b2734"}}}
			a, err := j.attempt(context.Background(), &nested.Outcome{OutDir: dir}, generic, nested.StepResult{Name: genericUnit})
			if err != nil {
				t.Fatal(err)
			}
			if a.Passed != tt.passed || a.Signature != nested.None || j.rep.GenericKVM == nil || j.rep.ExploreKVM != nil {
				t.Errorf("attempt = %+v (generic kvm %+v, cloud kvm %+v), want passed %v, no signature, the result kept as the generic one's",
					a, j.rep.GenericKVM, j.rep.ExploreKVM, tt.passed)
			}
			if !tt.passed && !strings.Contains(a.Detail, "--fs minix --depth 1 differs between backends") {
				t.Errorf("detail %q: want the explore named", a.Detail)
			}
		})
	}
	q := &exploreSummary{Backend: "qemu", UniqueStates: 8, Digest: "a0b6b21ad225"}
	kvmOut := []byte(`{"schema":"themis.v1.ExploreResult","summary":{"backend":"kvm","states":"24","unique_states":"8","digest":"a0b6b21ad225"}}`)
	for _, inject := range []string{"", injectDigest} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, exploreUnit+".out"), kvmOut, 0o644); err != nil {
			t.Fatal(err)
		}
		j := &job{o: options{inject: inject}, rep: &report{ExploreQEMU: q}}
		a, err := j.attempt(context.Background(), &nested.Outcome{OutDir: dir}, unit{Name: exploreUnit, Step: exploreUnit, MustPass: true}, nested.StepResult{Name: exploreUnit})
		if err != nil {
			t.Fatal(err)
		}
		if want := inject == ""; a.Passed != want || a.Signature != nested.None {
			t.Errorf("explore with -inject-fault %q: %+v, want passed %v, no signature", inject, a, want)
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

// TestEnded: the step running when the emulated host's run ended gets an
// attempt by how it ended: stopped on a signature (a stall too) or dead,
// the emulator's, retried; timed out with none, ours.
func TestEnded(t *testing.T) {
	for _, tt := range []struct {
		name string
		out  nested.Outcome
		want nested.Signature
	}{
		{"stalled", nested.Outcome{Stopped: &nested.Hit{Signature: nested.HostStalled, Step: "conf-nested", Line: "step conf-nested running 10m1s, past its timeout 8m0s"}}, nested.HostStalled},
		{"soft lockup", nested.Outcome{Stopped: &nested.Hit{Signature: nested.SoftLockup}}, nested.SoftLockup},
		{"died", nested.Outcome{Exited: "qemu: exit status 1"}, nested.HostDied},
		{"timed out", nested.Outcome{TimedOut: true}, nested.None},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := ended(&tt.out)
			if a.Signature != tt.want || a.Passed {
				t.Errorf("ended = %+v, want signature %v", a, tt.want)
			}
			if v := nested.Decide([]nested.Attempt{a}, true); (v == nested.Retry) != (tt.want != nested.None) {
				t.Errorf("verdict %v: a signature retries, none fails", v)
			}
		})
	}
}
