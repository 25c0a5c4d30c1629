package faultimage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/faultagent"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// Build builds the image whose agent crashes on crashOn
// (faultagent.CrashOn), over env's default image's kernel (its flavour
// "custom": a replay of its findings boots it by itself), in cacheDir
// ("": one of the test's own); it skips t when that kernel's unpacked
// tree is not in env's cache.
func Build(t *testing.T, env *vmmtest.Env, cacheDir, crashOn string) *guest.Image {
	t.Helper()
	if err := faultagent.CrashOn(crashOn).Check(); err != nil {
		t.Fatal(err)
	}
	src, err := guest.SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := guest.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	agentBin := filepath.Join(t.TempDir(), "themis-agent-fault")
	cmd := exec.Command(goBin, "build", "-o", agentBin, "-tags", "themisfault", "-trimpath", "-ldflags=-s -w -X main.crashOn="+crashOn, "./cmd/themis-agent")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the themisfault agent (crash on %q): %v\n%s", crashOn, err, b)
	}
	kernel, modules, err := guest.UnpackedKernel(env.CacheDir, env.Image.KernelVersion)
	if err != nil {
		t.Skipf("the default image's kernel tree: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if cacheDir == "" {
		cacheDir = t.TempDir()
	}
	img, err := guest.Build(ctx, guest.Options{CacheDir: cacheDir, Agent: agentBin, Kernel: kernel, ModulesDir: modules, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("the image crashing on %q: %v", crashOn, err)
	}
	return img
}
