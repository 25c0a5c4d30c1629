package nested

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/guest"
	"go.uber.org/zap/zaptest"
)

// need skips without QEMU (a failure under CI=true).
func need(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots an emulated host")
	}
	for _, tool := range []string{"qemu-system-x86_64", "mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required under CI=true: %v", tool, err)
			}
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

// TestEmulatedHost boots the emulated AMD-V host on a job that lists
// /dev/kvm with the host's own ls (staged with its shared libraries) and
// exits non-zero in a second step: the results come back through the job
// disk, and the host's kvm-amd is real hardware virtualization to our
// kvm package.
func TestEmulatedHost(t *testing.T) {
	need(t)
	cache, err := guest.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	st, err := NewStage(filepath.Join(work, "root"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"ls", "false"} {
		if err := st.Tool(tool); err != nil {
			t.Fatal(err)
		}
	}
	ls, _ := exec.LookPath("ls")
	no, _ := exec.LookPath("false")
	plan := Plan{Steps: []Step{
		{Name: "ls", Argv: []string{ls, "-l", "/dev/kvm"}, Timeout: Duration(time.Minute)},
		{Name: "false", Argv: []string{no}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := Run(ctx, Options{CacheDir: cache, WorkDir: work, Stage: st, Plan: plan, MemoryMiB: 512, Timeout: 4 * time.Minute, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("emulated host: kernel %s, kvm %s, %v wall", out.Result.Kernel, out.Result.KVM, out.Wall)
	if !strings.HasPrefix(out.Result.KVM, "true") {
		t.Errorf("kvm in the emulated host: %q, want hardware virtualization", out.Result.KVM)
	}
	if len(out.Result.Steps) != 2 || out.Result.Steps[0].ExitCode != 0 || out.Result.Steps[1].ExitCode != 1 {
		t.Fatalf("steps = %+v, want ls exit 0 and false exit 1", out.Result.Steps)
	}
	b, err := out.Output("ls")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "/dev/kvm") || !strings.HasPrefix(string(b), "c") {
		t.Errorf("ls -l /dev/kvm printed %q, want a character device", b)
	}
}

func TestPlanValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		plan Plan
		want string
	}{
		{"empty", Plan{}, "steps: 0"},
		{"bad name", Plan{Steps: []Step{{Name: "A/b", Argv: []string{"/x"}}}}, "steps[0].name"},
		{"twice", Plan{Steps: []Step{{Name: "a", Argv: []string{"/x"}}, {Name: "a", Argv: []string{"/x"}}}}, "used twice"},
		{"relative", Plan{Steps: []Step{{Name: "a", Argv: []string{"x"}}}}, "steps[0].argv"},
		{"no argv", Plan{Steps: []Step{{Name: "a"}}}, "steps[0].argv"},
		{"negative timeout", Plan{Steps: []Step{{Name: "a", Argv: []string{"/x"}, Timeout: -1}}}, "steps[0].timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.plan.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	good := Plan{Steps: []Step{{Name: "gated-1", Argv: []string{"/bin/x"}, Timeout: Duration(time.Minute)}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	b := []byte(`{"steps":[{"name":"a","argv":["/x"],"timeout":"90s"}]}`)
	p, err := ParsePlan(b)
	if err != nil || time.Duration(p.Steps[0].Timeout) != 90*time.Second {
		t.Fatalf("ParsePlan = %+v, %v", p, err)
	}
}

// TestStageProject: every guest image given is staged under the job's
// cache and listed, in order, in the variable that makes guest.Build
// return the image of the flavour asked for; the tools and libraries the
// generic flavour's lane needs come too (mkfs.minix, libfaketime).
func TestStageProject(t *testing.T) {
	missing := func(what string, err error) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true: %v", what, err)
		}
		t.Skipf("%s not on this host: %v", what, err)
	}
	for _, tool := range JobTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool, err)
		}
	}
	for _, lib := range JobLibs {
		if _, err := os.Stat(lib); err != nil {
			missing(lib, err)
		}
	}
	var imgs []*guest.Image
	for _, key := range []string{"c0ffee", "9e9e71c"} {
		dir := filepath.Join(t.TempDir(), key)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{guest.KernelFile, guest.InitramfsFile, guest.ManifestFile} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(key+f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		imgs = append(imgs, &guest.Image{Key: key, Kernel: filepath.Join(dir, guest.KernelFile)})
	}
	bin := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := NewStage(filepath.Join(t.TempDir(), "root"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := StageProject(st, imgs, map[string]string{"prog": bin})
	if err != nil {
		t.Fatal(err)
	}
	want := guest.PrebuiltEnv + "=/cache/images/c0ffee:/cache/images/9e9e71c"
	if !slices.Contains(env, want) {
		t.Errorf("env %q: want %s", env, want)
	}
	mkfsMinix, err := exec.LookPath("mkfs.minix")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/cache/images/c0ffee/" + guest.KernelFile, "/cache/images/9e9e71c/" + guest.InitramfsFile,
		"/cache/images/9e9e71c/" + guest.ManifestFile, BinDir + "/prog", mkfsMinix, JobLibs[0]} {
		if _, err := os.Stat(filepath.Join(st.Root, p)); err != nil {
			t.Errorf("not staged: %v", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(st.Root, "/cache/images/9e9e71c", guest.KernelFile)); err != nil || string(b) != "9e9e71c"+guest.KernelFile {
		t.Errorf("the second image's kernel staged as %q, %v", b, err)
	}
	if _, err := StageProject(st, nil, nil); err == nil {
		t.Error("a job with no guest image was staged")
	}
}
