package export

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/repro"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
)

// crashFiles replays crash finding f's setup and trace in a fresh session,
// sends the crash state it keeps to out.Image, and builds check.sh, README
// and trace.txt.
func crashFiles(ctx context.Context, m *session.Manager, f *session.Finding, out Sinks, sum *Summary) (repro.Files, error) {
	c := f.Crash
	if c == nil || len(f.LaneSpecs) != 1 {
		return nil, fmt.Errorf("finding %s: a crash finding without its crash point or one lane", f.ID)
	}
	var res *crashcheck.Result
	_, err := crashcheck.Run(ctx, m, crashcheck.Options{Lanes: f.LaneSpecs, Setup: c.Setup, NoSetupSync: !c.SetupSync, Trace: f.Trace,
		Only: c.Keep, StreamImage: true, Minimize: -1, Image: exploration.FindingImage(f)},
		crashcheck.Sinks{Result: func(r crashcheck.Result) { res = &r }, Image: func(_ string, off int64, data []byte, size int64) error {
			return out.Image(off, data, size)
		}})
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", f.ID, err)
	}
	if res == nil {
		return nil, fmt.Errorf("replay %s: no result for its crash state", f.ID)
	}
	in, err := crashInput(f)
	if err != nil {
		return nil, err
	}
	if sum.CrashReproduced = Reproduced(f, res); !sum.CrashReproduced {
		in.Detail += fmt.Sprintf(" (NOT reproduced by the replay that made %s: it was %s)", CrashImage, res.Verdict)
	}
	return repro.CrashFiles(in)
}

// Reproduced says whether res, the replay of crash finding f's state, is
// bad the same way: it lost what was made durable again, it lost the guest
// the same way (a kernel crash: a report of the same signature), or it is
// not clean again.
func Reproduced(f *session.Finding, res *crashcheck.Result) bool {
	was := f.Crash.Verdict
	switch {
	case strings.HasPrefix(f.Crash.Durability, "LOST"):
		return strings.HasPrefix(res.Durability, "LOST")
	case was == api.KernelCrash:
		return res.Verdict == was && res.Kernel != nil && f.Kernel != nil && res.Kernel.Signature() == f.Kernel.Signature()
	case was == api.Hung || was == api.Died:
		return res.Verdict == was
	}
	return res.Verdict == api.CrashDirty || res.Verdict == api.CrashBroken
}

// crashInput is what repro.CrashFiles needs of f.
func crashInput(f *session.Finding) (repro.Crash, error) {
	c := f.Crash
	sp, err := guest.ParseLaneSpec(f.LaneSpecs[0])
	if err != nil {
		return repro.Crash{}, fmt.Errorf("finding %s: lane %q: %w", f.ID, f.LaneSpecs[0], err)
	}
	tool, err := hostfsck.For(sp.FS)
	if err != nil {
		return repro.Crash{}, fmt.Errorf("finding %s: %w", f.ID, err)
	}
	return repro.Crash{ID: f.ID, Detail: f.Detail, Spec: f.LaneSpecs[0], FS: sp.FS, MountOptions: sp.MountOptions(), Setup: c.Setup, SetupSync: c.SetupSync,
		Trace: f.Trace, State: fmt.Sprintf("after %d flush(es), %s, in-flight writes %v of %v", c.Flushes, c.Kind, inFlight(c), c.Epoch),
		Keep: fmt.Sprint(c.Keep), InFlight: fmt.Sprint(inFlight(c)), Writes: c.Writes, LogFlushes: c.LogFlushes,
		States: c.States, NotClean: c.NotClean, Verdict: c.Verdict, Durability: c.Durability, Output: c.Output,
		Check: tool.Command(), Recover: tool.RecoverCommand(), Package: tool.Package(), Version: version()}, nil
}

// inFlight is the kept writes of the crash's epoch.
func inFlight(c *session.CrashPoint) []int {
	epoch := map[int]bool{}
	for _, e := range c.Epoch {
		epoch[e] = true
	}
	var out []int
	for _, k := range c.Keep {
		if epoch[k] {
			out = append(out, k)
		}
	}
	return out
}

func sortedNames(files repro.Files) []string {
	out := make([]string, 0, len(files))
	for n := range files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
