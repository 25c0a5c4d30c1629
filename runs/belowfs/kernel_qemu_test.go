package belowfs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/faultimage"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestKernelCrashFlipRealGuest is issue 27 item 4 in corruption: the
// guest image's agent (themisfault, CrashOn "mountfail:ext2") panics the
// stock kernel instead of answering a failed mount of the ext2 lane, as a
// kernel that crashes mounting a corrupt image. The superblock magic
// flip, whose mount fails, gets the class kernel-crash with the real
// report; the run goes on in a fresh session (the setup again), where the
// data flip is silent content damage as on the stock kernel.
func TestKernelCrashFlipRealGuest(t *testing.T) {
	longtest.Need(t, "a flip whose mount crashes the kernel (about 25 s; the crash path's TestKernelCrashStateRealGuest runs the same relay in the test command)")
	env := vmmtest.Setup(t)
	m := sessiontest.Real(t, session.Config{Image: faultimage.Build(t, env, "", "mountfail:ext2")})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	got := map[string]CorruptResult{}
	sum, err := Corrupt(ctx, m, CorruptOptions{Targets: []string{"superblock.magic", "data:d/f:0:0"}}, func(r CorruptResult) {
		t.Logf("+%s %s %s: %s (%+v)", time.Since(start).Round(time.Millisecond), r.Lane, r.Target, r.Class, r.Kernel)
		got[r.Target] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d results, %v, sessions %v, deaths %d, %s", sum.Results, sum.ByClass, sum.Sessions, sum.Deaths, sum.Elapsed.Round(time.Millisecond))
	magic := got["superblock.magic"]
	if k := magic.Kernel; magic.Class != ClassKernelCrash || k == nil || k.Title != "Kernel panic - not syncing: sysrq triggered crash" || len(magic.KernelLog) == 0 || magic.Field != "s_magic" {
		t.Errorf("superblock.magic: %+v: want kernel-crash with the sysrq report, the flip named", magic)
	}
	if r := got["data:d/f:0:0"]; r.Class != ClassSilentContent || !r.Mounted {
		t.Errorf("data:d/f:0:0 after the crash: %+v, want silent-content, mounted", r)
	}
	if sum.Results != 2 || sum.Deaths != 1 || len(sum.Sessions) != 2 {
		t.Errorf("summary %+v: want 2 results, 1 guest lost, 2 sessions", sum)
	}
	if in, err := m.Get(ctx, sum.Session); err != nil || in.State != session.StateFailed || !strings.Contains(in.Reason, "sysrq triggered crash") {
		t.Errorf("the first session: %+v, %v: want failed, its reason naming the report", in, err)
	}
}
