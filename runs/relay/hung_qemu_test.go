package relay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/internal/faultimage"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestHungTaskRealGuest is issue 27 item 3: a task stuck in D state is a
// kernel report, not a call timeout. The guest image's agent (themisfault,
// CrashOn "freeze:hang") freezes the ext4 lane (FIFREEZE) before it serves
// a mkdir of "hang", so the mkdir blocks in sb_start_write for good; the
// kernel's hung task detector, booted at vmm.HungTaskTimeout with
// hung_task_panic (vmm.HungTaskCmdline), reports the agent's task and
// panics, and the call fails with that report: a kernel-crash death whose
// report is a hung task, its trace through the freeze wait, well before the
// run's call bound. A long test: it waits out the detector (30-40 s).
// With $THEMIS_KREPORT_SAVE the console is saved there (kreport testdata).
func TestHungTaskRealGuest(t *testing.T) {
	longtest.Need(t, "a hung task is a kernel report (the detector's 30 s)")
	env := vmmtest.Setup(t)
	m := sessiontest.Real(t, session.Config{Image: faultimage.Build(t, env, "", "freeze:hang")})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: []string{"ext4"}}, "hung task test")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	t0 := time.Now()
	_, err = run.Apply(run.Context(), &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "hang", Mode: 0o755}}})
	took := time.Since(t0)
	d, ok := Of(run.Context(), err)
	if !ok || d.Verdict() != KernelCrash {
		t.Fatalf("mkdir on a frozen lane: %v after %s: want a kernel-crash death", err, took)
	}
	r := d.Report
	t.Logf("mkdir to the report: %s (detector %s, checked every %s; the run's call bound %s): %s; trace %v", took.Round(time.Millisecond),
		vmm.HungTaskTimeout, vmm.HungTaskCheck, session.RunCallTimeout, r.Summary(), r.Trace)
	if r.Kind != kreport.HungTask || !strings.Contains(r.Title, "blocked for more than 30 seconds") || r.Panic != "hung_task: blocked tasks" {
		t.Errorf("report %+v: want a hung task past 30 s and its panic", r)
	}
	if !inTrace(r.Trace, "percpu_rwsem_wait") && !inTrace(r.Trace, "mnt_want_write") {
		t.Errorf("trace %v: want the wait for the frozen filesystem", r.Trace)
	}
	if dir := os.Getenv("THEMIS_KREPORT_SAVE"); dir != "" {
		console, _ := vmm.DeathConsole(err)
		if err := os.WriteFile(filepath.Join(dir, "hungtask-freeze.txt"), []byte(console+"\n"), 0o644); err != nil {
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
