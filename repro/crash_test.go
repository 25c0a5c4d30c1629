package repro

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrashFilesCheck: the generated check.sh, run on real ext2 images,
// exits 1 on a clean one and 0 (reproduced) on one e2fsck finds errors in;
// the README names the trace, the setup and the state.
func TestCrashFilesCheck(t *testing.T) {
	for _, tool := range []string{"mkfs.ext2", "e2fsck", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (e2fsprogs; .ci/run installs it): %v", tool, err)
		}
	}
	files, err := CrashFiles(Crash{ID: "f-1", Detail: "lane ext2: dirty", Spec: "ext2", FS: "ext2", Setup: []string{"create seed 0644"}, SetupSync: true,
		Trace: []string{"mkdir d 0755", "fsync d"}, State: "after 0 flush(es), prefix: in-flight writes 0 of 0,1", Keep: "0", InFlight: "0",
		Verdict: "dirty", Check: []string{"e2fsck", "-fn"}, Recover: []string{"e2fsck", "-E", "journal_only", "-y"}, Package: "e2fsprogs"})
	if err != nil {
		t.Fatal(err)
	}
	readme := string(files["README"])
	for _, want := range []string{"mkdir d 0755", "create seed 0644", "then sync(2)", "in-flight writes 0 of 0,1", "e2fsck -fn"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README lacks %q:\n%s", want, readme)
		}
	}
	for _, tt := range []struct {
		name   string
		damage string // a debugfs -w request, "" for none
		mount  bool   // check.sh --mount (root and loop devices)
		want   int
	}{
		{"clean", "", false, 1},
		{"lost+found inode cleared", "clri <11>", false, 0},
		{"mounted, clean", "", true, 1},
		{"mounted, lost+found inode cleared", "clri <11>", true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := writeExportFiles(dir, files); err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(dir, "crash.img")
			run(t, "mkfs.ext2", "-q", "-F", img, "4M")
			if tt.damage != "" {
				run(t, "debugfs", "-w", "-R", tt.damage, img)
			}
			args := []string{filepath.Join(dir, "check.sh")}
			if tt.mount {
				if os.Geteuid() != 0 {
					t.Skip("check.sh --mount loop-mounts: root only")
				}
				if _, err := os.Stat("/dev/loop-control"); err != nil {
					t.Skipf("no loop devices: %v", err)
				}
				args = append(args, "--mount")
			}
			out, err := exec.Command("bash", args...).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.want {
				t.Errorf("check.sh exit %d, want %d:\n%s", code, tt.want, out)
			}
		})
	}
}

func writeExportFiles(dir string, files Files) error {
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
