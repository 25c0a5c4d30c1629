package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestCrashFindingRealGuest is the ext2 control end to end: `themisctl
// crash` on a trace with a decoy op before it records crash findings and
// exits 1 under --fail-on-findings; the first finding is minimized (the
// decoy goes, the persistence point stays); `themisctl findings export`
// checks its crash state again in a fresh session (as `themisctl replay`
// does), it reproduces, and writes the state as crash.img with check.sh,
// which reproduces it on the host without Themis.
func TestCrashFindingRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sock := startDaemon(t, bin, dir, env.CacheDir)
	cli := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"--addr", "unix://" + sock, "--json"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Logf("themisctl %v: %v\n%s", args, err, stderr.Bytes())
		}
		return out, err
	}
	out, err := cli("crash", "--fs", "ext2", "--setup", "create seed 0644", "--crash-writes", "-1", "--max-states", "16", "--minimize", "1",
		"--trace", "chmod seed 0600; mkdir d 0755; create d/f 0644; write d/f 0 12288 0x55; fsync d/f", "--fail-on-findings")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFindings {
		t.Fatalf("crash --fail-on-findings on ext2: %v, want exit status %d", err, exitFindings)
	}
	findings, summary := crashLines(t, out)
	if summary.GetFindings() == 0 || len(findings) == 0 {
		t.Fatalf("ext2 control: summary %v, findings %v: want crash findings", summary, findings)
	}
	var f *themisv1.Finding
	for _, l := range findings {
		if l.GetMinimized() && f == nil {
			f = l
		}
	}
	if f == nil {
		t.Fatalf("no minimized crash finding among %v", findings)
	}
	t.Logf("finding %s minimized to %q: keeps %v, %s", f.GetId(), f.GetTrace(), f.GetCrash().GetKeep(), f.GetCrash().GetVerdict())
	if tr := f.GetTrace(); len(tr) >= 5 || tr[len(tr)-1] != "fsync d/f" {
		t.Errorf("minimized trace %q: want fewer than 5 ops (the chmod is a decoy), ending in the fsync", tr)
	}
	// The export replays the finding in a fresh session (replayCrash) and
	// says in its README when that did not reproduce it.
	exp := filepath.Join(dir, "export")
	out, err = cli("findings", "export", f.GetId(), "--out", exp)
	if err != nil {
		t.Fatal(err)
	}
	var res themisv1.ExportResult
	decodeOut(t, out, &res)
	if files := res.GetSummary().GetFiles(); res.GetDir() != exp || res.GetSummary().GetKind() != "crash" || len(files) == 0 || files[len(files)-1] != "crash.img" {
		t.Errorf("findings --json export: %v: want the directory and the files, crash.img last", &res)
	}
	st, err := os.Stat(filepath.Join(exp, "crash.img"))
	if err != nil || st.Size() == 0 {
		t.Fatalf("crash.img: %v", err)
	}
	if readme, err := os.ReadFile(filepath.Join(exp, "README")); err != nil || bytes.Contains(readme, []byte("NOT reproduced")) {
		t.Errorf("the export's replay did not reproduce %s (%v):\n%s", f.GetId(), err, readme)
	}
	check, err := exec.CommandContext(ctx, "bash", filepath.Join(exp, "check.sh")).CombinedOutput()
	if err != nil {
		t.Errorf("check.sh on the exported crash state: %v, want exit 0 (reproduced):\n%s", err, check)
	}
}

// crashLines splits crash --json output (JSON lines, each decoded as the
// message its schema names) into its crash findings (each version) and
// its summary.
func crashLines(t *testing.T, out []byte) (findings []*themisv1.Finding, summary *themisv1.CrashSummary) {
	t.Helper()
	lines, err := jsonout.DecodeLines(out)
	if err != nil {
		t.Fatalf("crash --json: %v\n%s", err, out)
	}
	for _, m := range lines {
		switch m := m.(type) {
		case *themisv1.Finding:
			if m.GetCrash() != nil {
				findings = append(findings, m)
			}
		case *themisv1.CrashSummary:
			summary = m
		}
	}
	return findings, summary
}
