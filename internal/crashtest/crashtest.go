package crashtest

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

// Image builds, in cacheDir, the guest image with the themisfault agent
// whose kernel crashes on the requests crashOn names (faultagent.CrashOn,
// "mkdir"), over the kernel tree the default image was made of (its
// flavour "custom": a replay boots it by itself). It skips where that
// kernel tree is not unpacked in env's cache.
func Image(t *testing.T, env *vmmtest.Env, cacheDir, crashOn string) *guest.Image {
	t.Helper()
	src, err := guest.SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := guest.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	agentBin := filepath.Join(t.TempDir(), "themis-agent-crash")
	cmd := exec.Command(goBin, "build", "-o", agentBin, "-tags", "themisfault", "-trimpath", "-ldflags=-s -w -X main.crashOn="+crashOn, "./cmd/themis-agent")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the crashing agent: %v\n%s", err, b)
	}
	kernel, modules, err := guest.UnpackedKernel(env.CacheDir, env.Image.KernelVersion)
	if err != nil {
		t.Skipf("the default image's kernel tree: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := guest.Build(ctx, guest.Options{CacheDir: cacheDir, Agent: agentBin, Kernel: kernel, ModulesDir: modules, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("crashing image: %v", err)
	}
	return img
}
