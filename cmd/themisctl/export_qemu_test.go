package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report/reporttest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestFindingsExportRealGuest finds a real divergence (ext2 against btrfs
// under --policy exact: btrfs counts no subdirectories in a directory's
// nlink) with --junit and --fail-on-findings (exit 1, a report with the
// finding's case failing), exports it with `themisctl findings export`,
// (--report: every finding on the page Chromium loads), and runs the
// reproducer on this host's kernel, as root: it must
// reproduce, and the policy the finding was judged under must be the
// listing's.
func TestFindingsExportRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	if os.Geteuid() != 0 {
		skipOutsideCI(t, "repro.sh loop-mounts images: root only")
	}
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sock := startDaemon(t, bin, dir, env.CacheDir)
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--addr", "unix://" + sock, "--json"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("themisctl %v: %v\n%s", args, err, stderr.Bytes())
		}
		return out
	}
	var res themisv1.ExploreResult
	report := filepath.Join(dir, "junit.xml")
	explore := exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "--json", "explore", "--fs", "ext2,btrfs", "--policy", "exact", "--depth", "1",
		"--junit", report, "--fail-on-findings", "--report", filepath.Join(dir, "run.html"))
	stdout, err := explore.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFindings {
		t.Fatalf("explore --fail-on-findings with a finding: %v, want exit status %d", err, exitFindings)
	}
	decodeOut(t, stdout, &res)
	sum, found := res.GetSummary(), res.GetFindingList()
	xmlReport, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(xmlReport), "<failure") || !strings.Contains(string(xmlReport), `name="lane btrfs"`) {
		t.Errorf("--junit: no failing finding case or no lane case:\n%s", xmlReport)
	}
	// The run report, in Chromium where it is installed: every finding on it.
	if chromium, ok := reporttest.LookChromium(); ok {
		dom := reporttest.DumpDOM(t, chromium, filepath.Join(dir, "run.html"))
		for _, f := range found {
			if !strings.Contains(dom, `data-id="`+f.GetId()+`"`) {
				t.Errorf("--report: finding %s not on the page", f.GetId())
			}
		}
		if !strings.Contains(dom, `id="states-over-time"`) && !strings.Contains(dom, "No progress was reported.") {
			t.Error("--report: no states-over-time chart")
		}
	} else if os.Getenv("CI") != "" {
		t.Error("chromium not installed (Debian chromium)")
	}
	if len(found) == 0 {
		t.Fatal("ext2 against btrfs under exact: no finding")
	}
	var byDepth int64
	for _, n := range sum.GetUniqueByDepth() {
		byDepth += n
	}
	if len(sum.GetUniqueByDepth()) == 0 || sum.GetUniqueByDepth()[0] != 1 || byDepth != sum.GetUniqueStates() {
		t.Errorf("unique by depth %v, want the root's 1 first, adding up to the %d unique states", sum.GetUniqueByDepth(), sum.GetUniqueStates())
	}
	// The same run's page afterwards, from the ledger (report --run).
	again := filepath.Join(dir, "again.html")
	if err := exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "report", "--run", sum.GetSessionId(), "-o", again).Run(); err != nil {
		t.Fatalf("report --run %s: %v", sum.GetSessionId(), err)
	}
	page, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="unique-by-depth"`, sum.GetSessionId(), "found at the root state"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report --run: the page lacks %s", want)
		}
	}
	for _, f := range found {
		if !strings.Contains(string(page), `data-id="`+f.GetId()+`"`) {
			t.Errorf("report --run: finding %s not on the page", f.GetId())
		}
	}
	out := filepath.Join(dir, "export")
	run("findings", "export", found[0].GetId(), "--out", out)
	st, err := os.Stat(filepath.Join(out, "repro.sh"))
	if err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Fatalf("repro.sh: %v, mode %v: want an executable", err, st)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(out, "repro.sh"))
	cmd.Env = append(os.Environ(), "REPRO_WORK="+filepath.Join(dir, "work"))
	got, err := cmd.CombinedOutput()
	t.Logf("repro.sh:\n%s", got)
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		skipOutsideCI(t, "this kernel cannot mount a lane's filesystem (said by repro.sh)")
	}
	if err != nil || !strings.Contains(string(got), "REPRODUCED on") || !strings.Contains(string(got), "canonicalized: exact") {
		t.Errorf("repro.sh: %v; want it reproduced under the exact policy", err)
	}
}

// skipOutsideCI skips t for a reason the host gives, or fails it under
// CI=true, whose hosts run as root with ext2 and btrfs in the kernel.
func skipOutsideCI(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}
