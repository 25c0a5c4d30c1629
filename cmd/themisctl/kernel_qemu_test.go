package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/faultimage"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestKernelFindingCLIRealGuest is a kernel finding through a daemon, as
// a user meets it: explore on an image whose kernel panics on every mkdir
// (faultimage.Build) gives a kernel finding, minimized to the one mkdir;
// replay of it boots that image by itself (a custom one), says
// reproduced and carries the report in --json; export writes a README
// and repro.sh that say it crashes the kernel, and repro.sh refuses to
// run without --in-vm.
func TestKernelFindingCLIRealGuest(t *testing.T) {
	longtest.Need(t, "a kernel finding explored, replayed and exported through a daemon (about 40 s)")
	env := vmmtest.Setup(t)
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cache := t.TempDir()
	img := faultimage.Build(t, env, cache, "mkdir")
	sock := startDaemon(t, bin, t.TempDir(), cache)
	cli := func(args ...string) []byte {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, append([]string{"--addr", "unix://" + sock, "--json"}, args...)...).Output()
		if err != nil {
			t.Fatalf("themisctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t0 := time.Now()
	cli("explore", "--image", img.Key, "--fs", "ext2", "--ops", "mkdir", "--depth", "1", "--branching", "1", "--workers", "1")
	var list themisv1.ListFindingsResponse
	decodeOut(t, cli("findings"), &list)
	if len(list.GetFindings()) != 1 {
		t.Fatalf("findings: %v: want one", &list)
	}
	f := list.GetFindings()[0]
	if f.GetKind() != "kernel" || !f.GetMinimized() || len(f.GetTrace()) != 1 || !strings.HasPrefix(f.GetTrace()[0], "mkdir ") {
		t.Errorf("finding %v: want a kernel finding minimized to the one mkdir", f)
	}
	t.Logf("explore with minimization: %s", time.Since(t0).Round(time.Millisecond))
	var rep themisv1.ReplayResponse
	decodeOut(t, cli("replay", f.GetId()), &rep)
	if !rep.GetReproduced() || rep.GetCrashedAt() != 1 || rep.GetKernel().GetTitle() != "Kernel panic - not syncing: sysrq triggered crash" ||
		!strings.Contains(imageLine(rep.GetBooted()), img.Key[:12]) {
		t.Errorf("replay %s: %v: want it reproduced on the crashing image, with the report", f.GetId(), &rep)
	}
	dir := filepath.Join(t.TempDir(), "export")
	cli("findings", "export", f.GetId(), "--out", dir)
	for _, name := range []string{"README", "repro.sh"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(b), "THIS CRASHES THE KERNEL IT RUNS ON") || !strings.Contains(string(b), "sysrq triggered crash") {
			t.Errorf("export's %s: %v: want the warning and the report:\n%s", name, err, b)
		}
	}
	out, err := exec.Command("bash", filepath.Join(dir, "repro.sh")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--in-vm") {
		t.Errorf("repro.sh without --in-vm: %v\n%s: want exit 2 naming --in-vm", err, out)
	}
}
