package exploration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/internal/faultimage"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/opspec"
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
// applies fewer ops than the stock one: none under a mkdir. After the
// search the finding is minimized, each try in a fresh guest (the
// remount revert does not reset the kernel): it comes out as the one
// mkdir, in the ledger too, with the report of its last try. Then its
// minimized trace replays on a fresh session of the crashing image: the
// mkdir fails at once with the console holding a report of the same
// signature; the time from the op to the error and the minimization's
// per try are logged (docs/benchmarks.md), not asserted.
func TestKernelCrashRealGuest(t *testing.T) {
	env := vmmtest.Setup(t)
	img := faultimage.Build(t, env, t.TempDir(), "mkdir")
	stock := sessiontest.Real(t, session.Config{})
	crashing := sessiontest.Real(t, session.Config{Image: img})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	o := Options{Workers: 1, Lanes: []string{"ext2"}, Depth: 2, Branching: 2, Ops: []string{explore.OpMkdir, explore.OpCreateFile}, Seed: 7}

	base, err := Run(ctx, stock, o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stock image: %d states, %d unique, %d findings, stopped %q, %s", base.States, base.Unique, base.Findings, base.Stopped, base.Elapsed.Round(time.Millisecond))

	start := time.Now()
	var found, minimized []session.Finding
	sum, err := Run(ctx, crashing, o, nil, func(f session.Finding) {
		t.Logf("+%s finding %s %s (minimized %v): %s %q", time.Since(start).Round(time.Millisecond), f.ID, f.Kind, f.Minimized, f.Detail, f.Trace)
		if f.Minimized {
			minimized = append(minimized, f)
		} else {
			found = append(found, f)
		}
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
	if len(minimized) != 1 || !isMkdirAlone(minimized[0]) || minimized[0].Kernel.Signature() != k.Signature() {
		t.Errorf("minimized %+v: want the finding minimized to the one mkdir, with a report of the same signature", minimized)
	}
	stored, err := crashing.Finding(ctx, found[0].ID)
	if err != nil || !isMkdirAlone(*stored) || stored.Kernel.Title != k.Title || len(stored.FoundTrace) != len(found[0].Trace) {
		t.Fatalf("stored finding %+v, %v: want it minimized to the one mkdir, with its report and its trace as found", stored, err)
	}
	logMinimizeTries(ctx, t, crashing, sum.Sessions)
	replayFresh(ctx, t, crashing, "", stored)
}

// isMkdirAlone reports whether f is a minimized kernel finding of the one
// mkdir: the shortest trace that crashes the kernel of the test's image.
func isMkdirAlone(f session.Finding) bool {
	return f.Minimized && f.Kernel != nil && len(f.Trace) == 1 && strings.HasPrefix(f.Trace[0], "mkdir ")
}

// logMinimizeTries logs how long the minimization's tries took: the
// first begins with a fresh session ("explore.minimize.fresh"), a try
// that kills the guest ends with its replacement ("explore.worker.replaced"),
// the last with the minimized finding; the search's replacements before
// are left out.
func logMinimizeTries(ctx context.Context, t *testing.T, m *session.Manager, sessions []string) {
	t.Helper()
	var marks []session.Event
	for _, id := range sessions {
		evs, err := m.Events(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == "explore.minimize.fresh" || e.Kind == "explore.worker.replaced" || e.Kind == "finding.minimized" {
				marks = append(marks, e)
			}
		}
	}
	slices.SortFunc(marks, func(a, b session.Event) int { return a.Time.Compare(b.Time) })
	if i := slices.IndexFunc(marks, func(e session.Event) bool { return e.Kind == "explore.minimize.fresh" }); i > 0 {
		marks = marks[i:]
	}
	for i, e := range marks {
		if i > 0 {
			t.Logf("minimize: +%s %s: %s", e.Time.Sub(marks[i-1].Time).Round(time.Millisecond), e.Kind, e.Detail)
		} else {
			t.Logf("minimize: %s: %s", e.Kind, e.Detail)
		}
	}
}

// replayFresh replays f's trace on a fresh session of the crashing image
// (image, "" m's default): its last op must kill the guest with a report
// of f's signature. It logs how long that op took to fail.
func replayFresh(ctx context.Context, t *testing.T, m *session.Manager, image string, f *session.Finding) {
	t.Helper()
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: f.LaneSpecs, Image: image}, "kernel crash test")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	ops, err := opspec.ParseTrace(f.Trace)
	if err != nil {
		t.Fatal(err)
	}
	for i, op := range ops[:len(ops)-1] {
		if _, err := run.Apply(ctx, op); err != nil {
			t.Fatalf("replay op %d %s: %v", i+1, f.Trace[i], err)
		}
	}
	t0 := time.Now()
	_, err = run.Apply(ctx, ops[len(ops)-1])
	took := time.Since(t0)
	console, ok := vmm.DeathConsole(err)
	if !errors.Is(err, session.ErrGuestGone) || !ok {
		t.Fatalf("%s on the crashing image: %v (after %s): want a dead guest with its console", f.Trace[len(ops)-1], err, took)
	}
	r, ok := kreport.Parse(console)
	if !ok || r.Signature() != f.Kernel.Signature() {
		t.Fatalf("replayed, the console's report %+v: want one of signature %q:\n%s", r, f.Kernel.Signature(), console)
	}
	t.Logf("replayed in a fresh session: op to dead guest with report: %s (%s: %s, %d trace lines)", took.Round(time.Millisecond), r.Kind, r.Title, len(r.Trace))
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
