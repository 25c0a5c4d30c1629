package exploration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestKernelCrashRealGuest is issue 27 item 4 on a real kernel: a guest
// image whose agent (the themisfault one, faultagent.CrashOn "mkdir")
// makes the stock kernel panic through sysrq on every mkdir. The same
// small search (ext2, depth 2, mkdir and create_file) runs on the stock
// image and on that one: on the crashing one, the mkdirs are a "kernel"
// finding carrying the real report (its first line, a call trace through
// sysrq_handle_crash), the search goes on to its end past them, and it
// applies fewer ops than the stock one: none under a mkdir. Then one
// mkdir on a session of the crashing image: the call fails at once with
// the console holding the report; the time from the op to the error is
// logged (docs/benchmarks.md), not asserted.
func TestKernelCrashRealGuest(t *testing.T) {
	env := vmmtest.Setup(t)
	img := crashImage(t, env, "mkdir")
	stock := sessiontest.Real(t, session.Config{})
	crashing := sessiontest.Real(t, session.Config{Image: img})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	o := Options{Lanes: []string{"ext2"}, Depth: 2, Branching: 2, Ops: []string{explore.OpMkdir, explore.OpCreateFile}, Seed: 7}

	base, err := Run(ctx, stock, o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stock image: %d states, %d unique, %d findings, stopped %q, %s", base.States, base.Unique, base.Findings, base.Stopped, base.Elapsed.Round(time.Millisecond))

	start := time.Now()
	var found []session.Finding
	sum, err := Run(ctx, crashing, o, nil, func(f session.Finding) {
		t.Logf("+%s finding %s %s: %s", time.Since(start).Round(time.Millisecond), f.ID, f.Kind, f.Detail)
		found = append(found, f)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("crashing image: %d states, %d unique, %d findings, stopped %q, sessions %d, %s", sum.States, sum.Unique, sum.Findings, sum.Stopped, len(sum.Sessions), sum.Elapsed.Round(time.Millisecond))
	if len(found) != 1 || found[0].Kind != explore.KindKernel || found[0].Kernel == nil {
		t.Fatalf("findings %+v: want one kernel finding", found)
	}
	k := found[0].Kernel
	if k.Kind != kreport.Panic || k.Title != "Kernel panic - not syncing: sysrq triggered crash" || !inTrace(k.Trace, "sysrq_handle_crash+") {
		t.Errorf("report %+v: want the sysrq panic with sysrq_handle_crash in its trace", k)
	}
	if tr := found[0].Trace; len(tr) == 0 || !strings.HasPrefix(tr[len(tr)-1], "mkdir ") {
		t.Errorf("finding's trace %q: want it to end in a mkdir", tr)
	}
	if sum.Stopped != "" || sum.States == 0 || sum.States >= base.States || len(sum.Sessions) < 2 {
		t.Errorf("crashing search: stopped %q, %d states (stock %d), %d sessions: want it done, past the crash, fewer states, a replaced worker",
			sum.Stopped, sum.States, base.States, len(sum.Sessions))
	}
	stored, err := crashing.Finding(ctx, found[0].ID)
	if err != nil || stored.Kernel == nil || stored.Kernel.Title != k.Title {
		t.Errorf("stored finding %+v, %v: want its report", stored, err)
	}
	crashOnce(ctx, t, crashing)
}

// crashOnce applies one mkdir on a session of the crashing image and
// logs how long the op took to fail.
func crashOnce(ctx context.Context, t *testing.T, m *session.Manager) {
	t.Helper()
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: []string{"ext2"}}, "kernel crash test")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	op := &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d-00", Mode: 0o755}}}
	t0 := time.Now()
	_, err = run.Apply(ctx, op)
	took := time.Since(t0)
	console, ok := vmm.DeathConsole(err)
	if !errors.Is(err, session.ErrGuestGone) || !ok {
		t.Fatalf("mkdir on the crashing image: %v (after %s): want a dead guest with its console", err, took)
	}
	r, ok := kreport.Parse(console)
	if !ok {
		t.Fatalf("no kernel report in the console:\n%s", console)
	}
	t.Logf("op to dead guest with report: %s (%s: %s, %d trace lines)", took.Round(time.Millisecond), r.Kind, r.Title, len(r.Trace))
	if dir := os.Getenv("THEMIS_KREPORT_SAVE"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "sysrq.txt"), []byte(console+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func inTrace(trace []string, prefix string) bool {
	for _, f := range trace {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}

// crashImage builds the guest image with the themisfault agent whose
// kernel crashes on the requests crashOn names (faultagent.CrashOn), over
// the kernel tree the default image was made of, in a cache of its own.
func crashImage(t *testing.T, env *vmmtest.Env, crashOn string) *guest.Image {
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
	img, err := guest.Build(ctx, guest.Options{CacheDir: t.TempDir(), Agent: agentBin, Kernel: kernel, ModulesDir: modules, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("crashing image: %v", err)
	}
	return img
}
