package crashcheck

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/internal/faultimage"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestKernelCrashStateRealGuest is issue 27 item 4 on the crash path: the
// guest image's agent (themisfault, CrashOn "mount:crash:ext2") panics
// the stock kernel whenever an ext2 crash state is mounted on its spare
// disk. Each of ext2's two states gets the verdict kernel-crash with the
// real report, and its session ends failed; the run goes on in a fresh
// session (the setup and trace run again: the ext2 state after the first
// is checked there when the trace's write log has the shape it had, else
// counted as skipped with why), then ext3's states are checked in yet
// another, by the kernel. One crash finding carries the report, and
// replayed (the one state, as themisctl replay asks) it crashes again
// with a report of the same signature. Boot and crash times are logged.
func TestKernelCrashStateRealGuest(t *testing.T) {
	env := vmmtest.Setup(t)
	m := sessiontest.Real(t, session.Config{Image: faultimage.Build(t, env, "", "mount:crash:ext2")})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	var results []Result
	var found []session.Finding
	o := Options{Lanes: []string{"ext2", "ext3"}, Setup: []string{"create seed 0644"}, Trace: []string{"create f 0644", "write f 0 4096 0x55", "fsync f"},
		Crash: crash.Options{MaxSubset: -1, MaxStates: 2}, Minimize: -1}
	sum, err := Run(ctx, m, o, Sinks{
		Result: func(r Result) {
			t.Logf("+%s %s state %d (%s) in %s: %s", time.Since(start).Round(time.Millisecond), r.Lane, r.Index, r.State, r.Session, r.Verdict)
			results = append(results, r)
		},
		Finding: func(f session.Finding) { found = append(found, f) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ext2 := sum.Lanes["ext2"]
	t.Logf("sessions %v, deaths %d, partial %q; ext2 %+v; ext3 %+v; %s", sum.Sessions, sum.Deaths, sum.Partial, *ext2, *sum.Lanes["ext3"], sum.Elapsed.Round(time.Millisecond))
	var crashed, ext3 []Result
	for _, r := range results {
		switch {
		case r.Lane == "ext2" && r.Verdict == KernelCrash && isSysrq(r.Kernel):
			crashed = append(crashed, r)
		case r.Lane == "ext3" && !isDeath(r):
			ext3 = append(ext3, r)
		default:
			t.Errorf("%s state %d: %s (%+v): want ext2's states crashed by sysrq, ext3's checked", r.Lane, r.Index, r.Verdict, r.Kernel)
		}
	}
	if len(crashed) == 0 || ext2.Deaths != len(crashed) || ext2.Deaths+ext2.Skipped != 2 || (ext2.Skipped > 0) != (ext2.SkipNote != "") {
		t.Errorf("ext2: %d states crashed the kernel, %+v: want each of its 2 crashed or skipped, saying why", len(crashed), *ext2)
	}
	if len(ext3) != 2 || sum.Deaths != len(crashed) || len(sum.Sessions) != sum.Deaths+1 || sum.Partial != "" || crashed[0].Session != sum.Session {
		t.Errorf("ext3 states %d, deaths %d, sessions %v, partial %q: want ext3's 2 checked, one session per death more, the first where it began", len(ext3), sum.Deaths, sum.Sessions, sum.Partial)
	}
	if in, err := m.Get(ctx, sum.Session); err != nil || in.State != session.StateFailed || !strings.Contains(in.Reason, "sysrq triggered crash") {
		t.Errorf("the first session: %+v, %v: want failed, its reason naming the report", in, err)
	}
	f := deathFinding(t, found)
	stored, err := m.Finding(ctx, f.ID)
	if err != nil || stored.Kernel == nil || stored.Crash.Verdict != KernelCrash || stored.Session != sum.Session {
		t.Fatalf("stored finding %+v, %v: want the report and the verdict, in the first session", stored, err)
	}
	replayDeath(ctx, t, m, stored)
}

// isSysrq reports whether r is the report of the panic sysrq-c makes.
func isSysrq(r *kreport.Report) bool {
	if r == nil || r.Title != "Kernel panic - not syncing: sysrq triggered crash" {
		return false
	}
	for _, f := range r.Trace {
		if strings.HasPrefix(f, "sysrq_handle_crash+") {
			return true
		}
	}
	return false
}

// deathFinding is the one finding of found, a kernel-crash crash finding
// with the report.
func deathFinding(t *testing.T, found []session.Finding) session.Finding {
	t.Helper()
	if len(found) != 1 || found[0].Kind != session.KindCrash || found[0].Crash.Verdict != KernelCrash || !isSysrq(found[0].Kernel) ||
		!strings.HasSuffix(found[0].Signature, found[0].Kernel.Signature()) {
		t.Fatalf("findings %+v: want one crash finding of the kernel crash, its report and signature", found)
	}
	t.Logf("finding %s: %s; signature %q", found[0].ID, found[0].Detail, found[0].Signature)
	return found[0]
}

// replayDeath checks f's one state again in a fresh session, as themisctl
// replay does: it crashes the kernel again, with a report of f's
// signature.
func replayDeath(ctx context.Context, t *testing.T, m *session.Manager, f *session.Finding) {
	t.Helper()
	t0 := time.Now()
	var got []Result
	sum, err := Run(ctx, m, Options{Lanes: f.LaneSpecs, Setup: f.Crash.Setup, NoSetupSync: !f.Crash.SetupSync, Trace: f.Trace, Only: f.Crash.Keep},
		Sinks{Result: func(r Result) { got = append(got, r) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Verdict != KernelCrash || got[0].Kernel.Signature() != f.Kernel.Signature() || sum.Deaths != 1 || len(sum.Sessions) != 1 {
		t.Fatalf("replay: %+v, deaths %d, sessions %v: want the one state crashed again, same signature, no session after it", got, sum.Deaths, sum.Sessions)
	}
	t.Logf("replayed in a fresh session in %s: %s", time.Since(t0).Round(time.Millisecond), got[0].Kernel.Summary())
}
