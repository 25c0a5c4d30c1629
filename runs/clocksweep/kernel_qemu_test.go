package clocksweep

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/clock"
	"github.com/themisfs/themis/internal/faultimage"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/runs/relay"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestKernelCrashCellRealGuest is issue 27 item 4 in a clock sweep: the
// guest image's agent (themisfault, CrashOn "mkdir:clk") panics the stock
// kernel on the sweep's mkdir of its file, on every lane. At 2^31 the
// mkdir cell of ext2 gets the verdict kernel-crash with the real report;
// the cell runs again in a fresh session for ext4 alone, whose mkdir
// crashes too; then the create cells run in a third session and get
// their Table 8 verdicts (ext2 clamps, ext4 represents), and the contrast
// runs there.
func TestKernelCrashCellRealGuest(t *testing.T) {
	longtest.Need(t, "a sweep cell whose op crashes the kernel (about 25 s; the crash path's TestKernelCrashStateRealGuest runs the same relay in the test command)")
	env := vmmtest.Setup(t)
	m := sessiontest.Real(t, session.Config{Image: faultimage.Build(t, env, "", "mkdir:"+sweepFile)})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	cells := map[[2]string]Cell{}
	plan := clock.Plan{Name: "crash", Values: []clock.Value{{Name: "2^31", Sec: 1 << 31}}}
	sum, err := Run(ctx, m, Options{Lanes: []string{"ext2", "ext4"}, Plan: plan, Ops: []string{clock.OpMkdir, clock.OpCreate}}, func(c Cell) {
		t.Logf("+%s %s %s: %s %v", time.Since(start).Round(time.Millisecond), c.Lane, c.Op, c.Verdict, c.Kernel)
		cells[[2]string{c.Lane, c.Op}] = c
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d cells, %v, sessions %v, deaths %d, contrast %+v, %s", sum.Cells, sum.ByVerdict, sum.Sessions, sum.Deaths, sum.Contrast, sum.Elapsed.Round(time.Millisecond))
	for _, lane := range []string{"ext2", "ext4"} {
		c := cells[[2]string{lane, clock.OpMkdir}]
		if k := c.Kernel; c.Verdict != relay.KernelCrash || k == nil || k.Title != "Kernel panic - not syncing: sysrq triggered crash" || !inTrace(k.Trace, "sysrq_handle_crash+") {
			t.Errorf("%s mkdir: %+v: want kernel-crash with the sysrq report", lane, c)
		}
	}
	if c := cells[[2]string{"ext2", clock.OpCreate}]; c.Verdict != "clamped(2147483647)" {
		t.Errorf("ext2 create at 2^31 after the crashes: %+v, want clamped", c)
	}
	if c := cells[[2]string{"ext4", clock.OpCreate}]; c.Verdict != "represented" {
		t.Errorf("ext4 create at 2^31 after the crashes: %+v, want represented", c)
	}
	if sum.Cells != 4 || sum.ByVerdict[relay.KernelCrash] != 2 || sum.Deaths != 2 || len(sum.Sessions) != 3 || len(sum.Contrast) != 2 {
		t.Errorf("summary %+v: want 4 cells, 2 kernel crashes, 3 sessions, the contrast of both lanes", sum)
	}
	if in, err := m.Get(ctx, sum.Session); err != nil || in.State != session.StateFailed || !strings.Contains(in.Reason, "sysrq triggered crash") {
		t.Errorf("the first session: %+v, %v: want failed, its reason naming the report", in, err)
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
