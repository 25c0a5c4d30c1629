package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/themisfs/themis/vmm/vmmtest"
)

// crashLine is one --json line of `themisctl crash`: a state, a finding
// or the summary.
type crashLine struct {
	ID        string   `json:"id"`
	Kind      string   `json:"kind"`
	Trace     []string `json:"trace"`
	Minimized bool     `json:"minimized"`
	Crash     *struct {
		Keep    []int  `json:"keep"`
		Verdict string `json:"verdict"`
	} `json:"crash"`
	Findings int `json:"findings"`
}

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
	if summary.Findings == 0 || len(findings) == 0 {
		t.Fatalf("ext2 control: summary %+v, findings %v: want crash findings", summary, findings)
	}
	var f crashLine
	for _, l := range findings {
		if l.Minimized && f.ID == "" {
			f = l
		}
	}
	if f.ID == "" || f.Crash == nil {
		t.Fatalf("no minimized crash finding among %+v", findings)
	}
	t.Logf("finding %s minimized to %q: keeps %v, %s", f.ID, f.Trace, f.Crash.Keep, f.Crash.Verdict)
	if len(f.Trace) >= 5 || f.Trace[len(f.Trace)-1] != "fsync d/f" {
		t.Errorf("minimized trace %q: want fewer than 5 ops (the chmod is a decoy), ending in the fsync", f.Trace)
	}
	// The export replays the finding in a fresh session (replayCrash) and
	// says in its README when that did not reproduce it.
	exp := filepath.Join(dir, "export")
	if _, err := cli("findings", "export", f.ID, "--out", exp); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(exp, "crash.img"))
	if err != nil || st.Size() == 0 {
		t.Fatalf("crash.img: %v", err)
	}
	if readme, err := os.ReadFile(filepath.Join(exp, "README")); err != nil || bytes.Contains(readme, []byte("NOT reproduced")) {
		t.Errorf("the export's replay did not reproduce %s (%v):\n%s", f.ID, err, readme)
	}
	check, err := exec.CommandContext(ctx, "bash", filepath.Join(exp, "check.sh")).CombinedOutput()
	if err != nil {
		t.Errorf("check.sh on the exported crash state: %v, want exit 0 (reproduced):\n%s", err, check)
	}
}

// crashLines splits crash --json output into its findings (each version)
// and its summary.
func crashLines(t *testing.T, out []byte) (findings []crashLine, summary crashLine) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l crashLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%v: %s", err, sc.Bytes())
		}
		switch {
		case l.Kind == "crash" && l.Crash != nil:
			findings = append(findings, l)
		case l.Findings > 0:
			summary = l
		}
	}
	return findings, summary
}
