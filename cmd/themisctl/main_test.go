package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// themisctl builds the CLI once per test binary.
func themisctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "themisctl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestCLIErrors(t *testing.T) {
	bin := themisctl(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"explore", "--seed", "abc"}, `invalid argument "abc" for "--seed"`},
		{[]string{"explore", "--time-mode", "sometimes"}, "--time-mode"},
		{[]string{"explore", "--ops", "metis,mknod"}, `ops: explore: unknown op "mknod"`},
		{[]string{"apply", "s-1", "frobnicate", "x"}, "unknown operation"},
		{[]string{"apply", "s-1", "mkdir", "d", "--op", `{"sync":{}}`}, "not both"},
		{[]string{"fingerprint", "s-1", "--time", "later"}, "--time"},
		{[]string{"doctor", "--boot", "--restore-mode", "fast"}, "--restore-mode"},
		{[]string{"nosuch"}, "unknown command"},
		{[]string{"diff", "--session-b", "s-2", "a", "b"}, "need --session and --lane"},
		{[]string{"diff", "--session", "s-1", "--lane", "ext2", "--session-b", "s-2", "c-1"}, "FROM TO"},
		{[]string{"diff", "--session", "s-1", "--lane", "ext2", "c-1"}, "accepts 2 arg(s)"},
		{[]string{"report", "--write-sizes", "0"}, "--write-sizes"},
		{[]string{"report", "--from", "/nonexistent/report.json"}, "--from"},
		{[]string{"report", "--from", ".", "--fs", "ext4"}, "--fs does not apply"},
		{[]string{"report", "--json", "-o", "-", "--from", "."}, "pick one"},
		{[]string{"findings", "export", "f-../../x"}, `FINDING "f-../../x": not a finding id`},
		{[]string{"findings", "export", "f-1; rm -rf ~"}, "not a finding id"},
		{[]string{"findings", "status", "f-1", "fixed"}, `status: "fixed": want one of new, reported, fixed-upstream, expected`},
		{[]string{"findings", "status", "f-1"}, "accepts 2 arg(s)"},
		{[]string{"findings", "--status", "new,triaged"}, `--status: "triaged": want one of`},
	}
	for _, tt := range tests {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = append(os.Environ(), "THEMIS_SOCKET="+filepath.Join(t.TempDir(), "none.sock"))
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("themisctl %v: succeeded, want an error", tt.args)
			continue
		}
		if !strings.Contains(string(out), tt.want) {
			t.Errorf("themisctl %v: %s\nwant it to mention %q", tt.args, out, tt.want)
		}
	}
}

func TestDoctorJSON(t *testing.T) {
	bin := themisctl(t)
	out, err := exec.Command(bin, "doctor", "--json").Output()
	if err != nil {
		t.Fatalf("doctor --json: %v", err)
	}
	var r themisv1.DoctorReport
	if err := jsonout.DecodeInto(out, &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if r.GetBackend() == "" || r.GetBackendWhy() == "" || r.GetKvmKind() == "" || len(r.GetTools()) == 0 || r.GetCacheDir() == "" || len(r.GetLanes()) == 0 {
		t.Errorf("doctor --json: %s", out)
	}
}

func TestExitCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{errors.New("no daemon"), exitFailed},
		{&exitError{code: exitFindings, err: errors.New("2 findings")}, exitFindings},
		{fmt.Errorf("wrapped: %w", &exitError{code: exitFindings, err: errors.New("x")}), exitFindings},
	} {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
