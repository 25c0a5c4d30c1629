package repro

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFSTestsCheckout runs generated tests in a real fstests checkout,
// $THEMIS_FSTESTS_DIR (built, its local.config naming a TEST_DEV and a
// SCRATCH_DEV it may format; run as root), as the filesystem $FSTYP
// (default ext4): one whose expectation holds on any kernel must pass,
// one whose golden output is not what a kernel does must fail; neither
// may be "not run". The tests are written as generic/NNN with the first
// free numbers and removed after.
func TestFSTestsCheckout(t *testing.T) {
	dir := os.Getenv("THEMIS_FSTESTS_DIR")
	if dir == "" {
		t.Skip("THEMIS_FSTESTS_DIR is not set: no fstests checkout to run the generated tests in")
	}
	if os.Geteuid() != 0 {
		t.Skip("fstests runs as root")
	}
	if _, err := os.Stat(filepath.Join(dir, "local.config")); err != nil {
		t.Skipf("%s has no local.config (TEST_DEV, SCRATCH_DEV): %v", dir, err)
	}
	fstyp := os.Getenv("FSTYP")
	if fstyp == "" {
		fstyp = "ext4"
	}
	trace := []string{"mkdir d 0755", "create d/f 0640", "write d/f 0 8192 0x61", "link d/f g", "chmod g 0600", "rename g h", "fsync h"}
	tests := []struct {
		name string
		in   FSTests
		pass bool
	}{
		{"holds", FSTests{Finding: Finding{ID: "f-ci1", Kind: KindState, Path: "d/f", Field: "mode", Trace: trace}, Value: "0600", Reference: "lane x"}, true},
		{"wrong errno", FSTests{Finding: Finding{ID: "f-ci2", Kind: KindErrno, Trace: []string{"mkdir d 0755", "rmdir d"}}, Errno: int(syscall.ENOTEMPTY), Reference: "lane x"}, false},
		{"remount", FSTests{Finding: Finding{ID: "f-ci3", Kind: KindRemount, Trace: trace, Revert: "remount"}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			num := freeTestNumber(t, filepath.Join(dir, "tests", "generic"))
			in := tc.in
			in.Name, in.Lane = "generic/"+num, Lane{Spec: fstyp, FS: fstyp}
			files, err := FSTestsFiles(in)
			if err != nil {
				t.Fatal(err)
			}
			for n, b := range files {
				p := filepath.Join(dir, "tests", "generic", n)
				if err := os.WriteFile(p, b, 0o755); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Remove(p) })
			}
			t.Cleanup(func() { exec.Command("make", "-C", filepath.Join(dir, "tests", "generic"), "group.list").Run() })
			if out, err := exec.Command("make", "-C", filepath.Join(dir, "tests", "generic"), "group.list").CombinedOutput(); err != nil {
				t.Fatalf("make group.list: %v\n%s", err, out)
			}
			cmd := exec.Command("./check", in.Name)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "FSTYP="+fstyp)
			out, _ := cmd.CombinedOutput()
			t.Logf("./check %s:\n%s", in.Name, out)
			switch s := string(out); {
			case strings.Contains(s, "[not run]") || strings.Contains(s, "Not run:"):
				t.Errorf("%s did not run", in.Name)
			case tc.pass && !strings.Contains(s, "Passed all 1 tests"):
				t.Errorf("%s did not pass", in.Name)
			case !tc.pass && !strings.Contains(s, "Failed 1 of 1 tests"):
				t.Errorf("%s did not fail", in.Name)
			}
		})
	}
}

// freeTestNumber is the first number from 900 no file in dir starts with.
func freeTestNumber(t *testing.T, dir string) string {
	t.Helper()
	for n := 900; n < 1000; n++ {
		num := fmt.Sprint(n)
		if m, _ := filepath.Glob(filepath.Join(dir, num+"*")); len(m) == 0 {
			return num
		}
	}
	t.Fatalf("%s: no free number from 900 to 999", dir)
	return ""
}
