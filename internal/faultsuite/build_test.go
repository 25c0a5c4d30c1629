package faultsuite

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// goBuild builds pkg of the source tree at out with extra go build args.
func goBuild(t *testing.T, pkg, out string, env []string, args ...string) {
	t.Helper()
	src, err := guest.SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := guest.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, append(append([]string{"build", "-o", out}, args...), pkg)...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// faultImage builds the guest image with the themisfault agent
// (internal/faultagent) into a cache dir of the suite's own, over the
// kernel tree the default image (env) was made of, unpacked in env's cache.
func faultImage(t *testing.T, env *vmmtest.Env) *guest.Image {
	t.Helper()
	agentBin := filepath.Join(dirs.Work, "themis-agent-fault")
	goBuild(t, "./cmd/themis-agent", agentBin, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"},
		"-tags", "themisfault", "-trimpath", "-ldflags=-s -w")
	kernel, modules, err := guest.UnpackedKernel(env.CacheDir, env.Image.KernelVersion)
	if err != nil {
		// A default image from $THEMIS_GUEST_IMAGE comes without its tree.
		if os.Getenv("CI") == "true" || os.Getenv("THEMIS_REQUIRE_QEMU") == "1" {
			t.Fatalf("faultsuite: the default image's kernel tree: %v", err)
		}
		t.Skipf("faultsuite: skipped, the default image's kernel tree: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := guest.Build(ctx, guest.Options{CacheDir: filepath.Join(dirs.Work, "cache"), Agent: agentBin,
		Kernel: kernel, ModulesDir: modules, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("fault image: %v", err)
	}
	return img
}
