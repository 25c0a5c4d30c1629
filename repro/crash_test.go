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
				args = append(args, "--mount", "--untrusted-ok")
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

// TestCrashCheckSandbox: run as root, check.sh runs the journal replay and
// the checker as uid nobody with no capability, in a network namespace of
// their own where the host has one to give, the replay on a copy it may
// write and the checker on one it may only read; where setpriv, unshare or
// prlimit fails it says so and runs without. Stand-ins on PATH record what
// they ran as.
func TestCrashCheckSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("check.sh drops to uid nobody only when it runs as root")
	}
	for _, tool := range []string{"setpriv", "unshare", "prlimit", "getent"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (util-linux, libc-bin): %v", tool, err)
		}
	}
	ent, err := exec.Command("getent", "passwd", "nobody").Output()
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	nobody := strings.Split(string(ent), ":")[2]
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	netns := exec.Command("unshare", "--net", "--ipc", "--uts", "--pid", "--fork", "--kill-child", "--", "true").Run() == nil
	files, err := CrashFiles(Crash{ID: "f-1", FS: "ext4", Verdict: "dirty", Check: []string{"checker.stub", "-fn"},
		Recover: []string{"recover.stub", "-E", "journal_only", "-y"}, Package: "e2fsprogs"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		broken  string // a tool of the sandbox that fails here
		uid     string
		ownNet  bool
		wantOut string
	}{
		{"sandboxed", "", nobody, netns, "== sandbox: uid " + nobody + ", no capability"},
		{"no setpriv", "setpriv", "0", netns, "AS ROOT (setpriv"},
		{"no unshare", "unshare", nobody, false, "no namespaces (unshare"},
		{"no prlimit", "prlimit", nobody, netns, "no rlimits (prlimit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			record, stubDir := nobodyDir(t), sandboxStubs(t, tt.broken)
			if err := os.Chmod(record, 0o1777); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := writeExportFiles(dir, files); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "crash.img"), make([]byte, 4096), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", filepath.Join(dir, "check.sh"))
			cmd.Env = []string{"PATH=" + stubDir + ":/usr/sbin:/usr/bin:/sbin:/bin", "RECORD=" + record, "LC_ALL=C"}
			out, err := cmd.CombinedOutput()
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("check.sh: %v, want exit 1 (clean):\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.wantOut) {
				t.Errorf("check.sh output lacks %q:\n%s", tt.wantOut, out)
			}
			for _, tool := range []struct{ name, mode string }{{"recover.stub", "rw"}, {"checker.stub", "ro"}} {
				uid, caps, net, mode := ranAs(t, record, tool.name, out)
				if uid != tt.uid || tt.uid != "0" && (caps != "0000000000000000" || mode != tool.mode) {
					t.Errorf("%s ran as uid %s, CapEff %s, image %s; want uid %s, no capability, image %s", tool.name, uid, caps, mode, tt.uid, tool.mode)
				}
				if (net != hostNet) != tt.ownNet {
					t.Errorf("%s ran in network namespace %s (the host's: %s); want its own: %v", tool.name, net, hostNet, tt.ownNet)
				}
			}
		})
	}
}

// sandboxStubs is a PATH dir nobody can read with the stand-in checker and
// journal replay (they record their uid, capabilities, network namespace
// and whether they may write the image into $RECORD/NAME) and broken, when
// not "", a tool of the sandbox that fails.
func sandboxStubs(t *testing.T, broken string) string {
	t.Helper()
	dir := nobodyDir(t)
	stub := `#!/bin/bash
img=${!#}
w=ro; [ -w "$img" ] && w=rw
printf '%s %s %s %s\n' "$(id -u)" "$(awk '/^CapEff/ {print $2}' /proc/self/status)" "$(readlink /proc/self/ns/net)" "$w" >"$RECORD/${0##*/}"
`
	scripts := map[string]string{"checker.stub": stub, "recover.stub": stub}
	if broken != "" {
		scripts[broken] = "#!/bin/sh\nexit 1\n"
	}
	for name, s := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ranAs is what the stand-in name recorded in record.
func ranAs(t *testing.T, record, name string, out []byte) (uid, caps, net, mode string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(record, name))
	if err != nil {
		t.Fatalf("%s did not run: %v\n%s", name, err, out)
	}
	f := strings.Fields(string(b))
	if len(f) != 4 {
		t.Fatalf("%s recorded %q", name, b)
	}
	return f[0], f[1], f[2], f[3]
}
