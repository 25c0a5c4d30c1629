package repro

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/oracle"
)

// everyOp is a trace with every op kind a reproducer exports.
var everyOp = []string{
	"mkdir d-00 0755", "create d-00/f-00 0644", "create f-01 0644 excl", "create f-02 0600 trunc",
	"write d-00/f-00 4095 4097 0x55", "write f-01 0 1 0xff append", "write f-02 65536 0 0x00 sync",
	"truncate f-01 1023", "chmod f-01 0600", "chown f-01 1000", "chgrp f-01 1000",
	"setxattr f-01 user.themis0 themis create", "removexattr f-01 user.themis0",
	"link f-01 d-00/f-03", "symlink d-00/f-01 s-00", "rename f-02 d-00/f-04",
	"utimens f-01 now 5.000000001", "utimens s-00 omit now", "fsync", "fsync f-01", "fdatasync d-00/f-00",
	"sync", "drop-caches 1", "unlink f-01", "rmdir d-00",
}

func lanesOf(t *testing.T, specs ...string) []Lane {
	t.Helper()
	var out []Lane
	for _, s := range specs {
		sp, err := guest.ParseLaneSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := baseimage.ShellCommand(context.Background(), sp)
		if err != nil {
			needTools(t, err)
		}
		out = append(out, Lane{Spec: s, FS: sp.FS, SizeMiB: sp.SizeMiB, MountOptions: sp.MountOptions(), Package: "e2fsprogs", Mkfs: cmd})
	}
	return out
}

// needTools skips a test whose host tools are missing, or fails it under
// CI=true (CI installs them).
func needTools(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(err)
	}
	t.Skip(err)
}

// writeFiles writes a reproducer into a new temporary directory.
func writeFiles(t *testing.T, files Files) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestGenerateCompiles generates a reproducer of every op kind and
// compiles its C with every warning an error, and checks the script's
// syntax.
func TestGenerateCompiles(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		needTools(t, err)
	}
	files, err := Generate(Input{
		Finding: Finding{ID: "f-test", Kind: KindState, Detail: `lanes "a" and b differ at d: nlink 3 != 1 $(x) */`, Trace: everyOp, Revert: "remount"},
		Lanes:   lanesOf(t, "ext4", "ext2:inode_size=256"), Policy: oracle.MetisParity,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := writeFiles(t, files)
	if out, err := exec.Command(cc, "-Wall", "-Wextra", "-Werror", "-o", filepath.Join(dir, "repro"), filepath.Join(dir, "repro.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "repro"), "steps").Output()
	if err != nil || strings.TrimSpace(string(out)) != "25" {
		t.Errorf("repro steps: %q, %v; want %d", out, err, len(everyOp))
	}
	if out, err := exec.Command("bash", "-n", filepath.Join(dir, "repro.sh")).CombinedOutput(); err != nil {
		t.Errorf("bash -n repro.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"E2FSPROGS_FAKE_TIME=1000000000", "mkfs.ext4", "-U " + baseimage.UUID, "remount_all"} {
		if !strings.Contains(string(files["repro.sh"]), want) {
			t.Errorf("repro.sh has no %q", want)
		}
	}
}

func TestGenerateRefuses(t *testing.T) {
	two := []Lane{{Spec: "ext4", FS: "ext4"}, {Spec: "btrfs", FS: "btrfs"}}
	tests := []struct {
		name  string
		f     Finding
		lanes []Lane
		want  string
	}{
		{"guest died", Finding{ID: "f-1", Kind: "guest-died"}, two, "only"},
		{"self reference", Finding{ID: "f-1", Kind: "self-reference:remount"}, two, "only"},
		{"one lane", Finding{ID: "f-1", Kind: KindState}, two[:1], "two or more"},
		{"sets the clock", Finding{ID: "f-1", Kind: KindState, Trace: []string{"set-clock 5"}}, two, "not exported"},
		{"mounts", Finding{ID: "f-1", Kind: KindState, Trace: []string{"umount"}}, two, "not exported"},
		{"bad op", Finding{ID: "f-1", Kind: KindState, Trace: []string{"frobnicate x"}}, two, "frobnicate"},
		{"drop caches 4", Finding{ID: "f-1", Kind: KindState, Trace: []string{"drop-caches 4"}}, two, "level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Generate(Input{Finding: tt.f, Lanes: tt.lanes})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Generate: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"mkfs.ext4": "mkfs.ext4", "FAKETIME=2001-09-09 01:46:40": "'FAKETIME=2001-09-09 01:46:40'",
		"it's": `'it'\''s'`, "": "''", "$(x)": "'$(x)'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestReproOnHost runs exported reproducers for real on this host's
// kernel (root, loop devices, ext4 and btrfs built in): a state divergence
// and an errno divergence between ext4 and btrfs reproduce (exit 0), and
// a trace on which ext2 and ext4 agree under Metis's rules does not (exit
// 1, said plainly).
func TestReproOnHost(t *testing.T) {
	if testing.Short() {
		t.Skip("makes and loop-mounts images")
	}
	if os.Geteuid() != 0 {
		needTools(t, errors.New("repro.sh runs as root"))
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		needTools(t, err)
	}
	tests := []struct {
		name   string
		f      Finding
		lanes  []string
		policy oracle.Policy
		status int
		want   string
	}{
		{"state", Finding{ID: "f-state", Kind: KindState, Detail: "lanes differ at d-00: nlink 3 != 1",
			Trace: []string{"mkdir d-00 0755", "mkdir d-00/d-01 0755"}, Revert: "remount"},
			[]string{"ext4", "btrfs"}, oracle.MetisParity, 0, "nlink=3"},
		{"errno", Finding{ID: "f-errno", Kind: KindErrno, Detail: "truncate past ext4's largest file",
			Trace: []string{"create f-00 0644", "truncate f-00 1125899906842624"}, Revert: "machine"},
			[]string{"ext4", "btrfs"}, oracle.MetisParity, 0, "errno 27"},
		{"agree", Finding{ID: "f-agree", Kind: KindState, Detail: "a control: nothing differs",
			Trace: []string{"mkdir d-00 0755", "create d-00/f-00 0644", "write d-00/f-00 0 4097 0x55"}},
			[]string{"ext2", "ext4"}, oracle.MetisParity, 1, "NOT REPRODUCED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := Generate(Input{Finding: tt.f, Lanes: lanesOf(t, tt.lanes...), Policy: tt.policy, Kernel: "test"})
			if err != nil {
				t.Fatal(err)
			}
			dir := writeFiles(t, files)
			cmd := exec.Command("bash", filepath.Join(dir, "repro.sh"))
			cmd.Env = append(os.Environ(), "REPRO_WORK="+filepath.Join(dir, "work"))
			out, err := cmd.CombinedOutput()
			status := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			t.Logf("repro.sh (exit %d):\n%s", status, out)
			if status != tt.status || !strings.Contains(string(out), tt.want) {
				t.Errorf("exit %d, want %d with %q", status, tt.status, tt.want)
			}
		})
	}
}

// TestGenerateBurstRemounts checks that under the remount revert repro.sh
// remounts before every op but the first, a collide burst's later ones and
// a same-mount op (explore.SharesMount), as the search did.
func TestGenerateBurstRemounts(t *testing.T) {
	names := explore.CollidingNames()
	trace := []string{"create f-00 0644", "create " + names[0] + " 0644", "create " + names[1] + " 0644", "rename f-00 " + names[explore.CollideFill], "unlink f-00",
		"write f-01 0 9 0x55 creat", "same-mount truncate f-01 4096"}
	files, err := Generate(Input{
		Finding: Finding{ID: "f-test", Kind: KindState, Detail: "d", Trace: trace, Revert: "remount"},
		Lanes:   lanesOf(t, "ext4", "ext2"), Policy: oracle.MetisParity,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every op after the first meets the tree walked (then remounted), as
	// the run's fingerprint of the state before it left it.
	for _, want := range []string{"fresh=(0 1 0 0 1 1 0 )", "walk=(0 1 1 1 1 1 1 )", `"$work/repro" state lane0-ext4 "$mnt0" >/dev/null;`} {
		if !strings.Contains(string(files["repro.sh"]), want) {
			t.Errorf("repro.sh has no %q:\n%s", want, files["repro.sh"])
		}
	}
}
