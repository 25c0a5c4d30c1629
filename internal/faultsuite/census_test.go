package faultsuite

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCensusSeesLeaks leaves each kind of thing the suite counts behind
// once and checks that Diff names it, then that it is back at baseline
// once the thing is gone: every assertion of the suite can fail.
func TestCensusSeesLeaks(t *testing.T) {
	dir := t.TempDir()
	s := Scope{PID: os.Getpid(), Scratch: filepath.Join(dir, "scratch"), Temp: filepath.Join(dir, "tmp")}
	for _, d := range []string{s.Scratch, s.Temp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.Scratch, "themis-ram-bystander"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		leak func(t *testing.T) (undo func())
		want string
	}{
		{"a scratch entry", func(t *testing.T) func() { return file(t, s.Scratch, "themis-ram-leak") }, "scratch entries: 1 more than at baseline: themis-ram-leak"},
		{"a temp entry", func(t *testing.T) func() { return file(t, s.Temp, "themis-leak") }, "temp entries: 1 more than at baseline: themis-leak"},
		{"a baseline entry gone", func(t *testing.T) func() {
			p := filepath.Join(s.Scratch, "themis-ram-bystander")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return func() { file(t, s.Scratch, "themis-ram-bystander") }
		}, "scratch entries: 1 of the baseline gone: themis-ram-bystander"},
		{"an fd", func(t *testing.T) func() {
			f, err := os.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			return func() { f.Close() }
		}, "fds: "},
		{"a process naming the scratch dir", func(t *testing.T) func() {
			cmd := exec.Command("sh", "-c", "sleep 60; :", s.Scratch+"/themis-x/qmp.sock") // "; :": no exec of sleep in place of sh
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := cmd.Process.Kill(); err != nil {
					t.Error(err)
				}
				_ = cmd.Wait() // killed: "signal: killed"
			}
		}, "QEMU processes: 1 more than at baseline"},
		{"a child process (a host checker, say)", func(t *testing.T) func() {
			cmd := exec.Command("sh", "-c", "sleep 60; :")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := cmd.Process.Kill(); err != nil {
					t.Error(err)
				}
				_ = cmd.Wait() // killed: "signal: killed"
			}
		}, "other processes of the daemon: 2 more than at baseline: "},
		{"an unreaped child", func(t *testing.T) func() {
			cmd := exec.Command("true")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := cmd.Wait(); err != nil {
					t.Error(err)
				}
			}
		}, "unreaped children: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, err := s.Take()
			if err != nil {
				t.Fatal(err)
			}
			undo := tt.leak(t)
			if got := waitDiff(t, s, base, func(d string) bool { return strings.Contains(d, tt.want) }); !strings.Contains(got, tt.want) {
				t.Errorf("Diff after leaving %s: %q, want it to say %q", tt.name, got, tt.want)
			}
			undo()
			if got := waitDiff(t, s, base, func(d string) bool { return d == "" }); got != "" {
				t.Errorf("Diff once %s is gone: %q, want none", tt.name, got)
			}
		})
	}
}

// waitDiff takes censuses for up to 5 s until ok(Diff) and returns the last Diff.
func waitDiff(t *testing.T, s Scope, base Census, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := s.Take()
		if err != nil {
			t.Fatal(err)
		}
		d := c.Diff(base)
		if ok(d) || time.Now().After(deadline) {
			return d
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// file creates dir/name and returns its removal.
func file(t *testing.T, dir, name string) func() {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(p); err != nil {
			t.Error(err)
		}
	}
}
