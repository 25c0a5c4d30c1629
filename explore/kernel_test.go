package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/internal/kreport"
)

// crashReport is the toy kernel's report.
var crashReport = kreport.Report{Kind: kreport.Bug, Title: "kernel BUG at fs/toy/namei.c:12!", RIP: "toy_mkdir+0x1c/0x90 [toy]",
	Trace: []string{"vfs_mkdir+0x9c/0x140", "do_mkdirat+0x8a/0x140"}, Panic: "Fatal exception"}

// hungReport is the toy kernel's hung task report.
var hungReport = kreport.Report{Kind: kreport.HungTask, Title: "INFO: task kworker/u4:2:47 blocked for more than 30 seconds.",
	Trace: []string{"__schedule+0x2f0/0x8a0", "io_schedule+0x42/0x70"}, Panic: "hung_task: blocked tasks"}

// crashingSystem is a toy System whose kernel crashes on every mkdir of
// d-00 (a KernelCrash, or with report false a death with nothing on the
// console; with hang, a hung task's report); after a death every call
// fails. With left set, only its first *left mkdirs of d-00 (counted by
// every System sharing it) die. deaths counts the deaths by the state
// they happened at and the op (mkdir d-00 with its mode).
type crashingSystem struct {
	*toySystem
	report bool
	hang   bool
	left   *int
	dead   bool
	mu     *sync.Mutex
	deaths map[string]int
}

func (c *crashingSystem) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	if c.dead {
		return nil, fmt.Errorf("toy: %w", ErrGuestDied)
	}
	if op.GetMkdir().GetPath() != "d-00" {
		return c.toySystem.Apply(ctx, op)
	}
	st, err := c.toySystem.Fingerprint(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.left != nil && *c.left == 0 {
		c.mu.Unlock()
		return c.toySystem.Apply(ctx, op)
	}
	if c.left != nil {
		*c.left--
	}
	c.deaths[stateKey(st)+"\x00"+opKey(op)]++
	c.mu.Unlock()
	c.dead = true
	err = fmt.Errorf("toy: the guest reset: %w", ErrGuestDied)
	switch {
	case c.hang:
		return nil, &KernelCrash{Report: hungReport, Err: err}
	case c.report:
		return nil, &KernelCrash{Report: crashReport, Err: err}
	}
	return nil, err
}

func (c *crashingSystem) Restore(ctx context.Context, id CheckpointID) error {
	if c.dead {
		return fmt.Errorf("toy: %w", ErrGuestDied)
	}
	return c.toySystem.Restore(ctx, id)
}

// runCrashing runs cfg over n crashing Systems, replaced as they die,
// and returns the result, the deaths by state and the Systems made.
func runCrashing(t *testing.T, n int, report bool, cfg Config) (*Result, map[string]int, int) {
	t.Helper()
	return runDying(t, n, crashingSystem{report: report}, cfg)
}

// runDying is runCrashing over Systems that die as like does (its report,
// hang and left).
func runDying(t *testing.T, n int, like crashingSystem, cfg Config) (*Result, map[string]int, int) {
	t.Helper()
	var mu sync.Mutex
	deaths := map[string]int{}
	made := 0
	mk := func() System {
		mu.Lock()
		made++
		mu.Unlock()
		return &crashingSystem{toySystem: newToy("", ""), report: like.report, hang: like.hang, left: like.left, mu: &mu, deaths: deaths}
	}
	w := Workers{Replace: func(context.Context, int, System) (System, error) { return mk(), nil }}
	for range n {
		w.Systems = append(w.Systems, mk())
	}
	c, err := NewParallelChecker(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return res, deaths, made
}

// TestKernelCrashGoesOn: an op that crashes the kernel is a "kernel"
// finding with the report, found at its first death; the worker gets a
// fresh System, the op is never applied again at a state where it killed
// a guest, and the search goes on to its end: the same states, digest and
// findings over 1, 2 and 4 workers, fewer states than the crash-free
// search and none it lacks. (Before, the death was retried once, then
// ended the search: stopped "guest-died".) The deaths counted are the
// search's: minimization is off (it replays the finding's trace once
// more; TestMinimizeKernel and TestKernelCrashMinimized).
func TestKernelCrashGoesOn(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 5, Depth: 3, Ops: []string{OpMkdir, OpCreateFile, OpRmdir}, Pool: PathPool{Files: 1, Dirs: 2, Depth: 1}, KeepStates: true, NoMinimize: true}
	base, err := NewChecker(newToy("", ""), cfg)
	if err != nil {
		t.Fatal(err)
	}
	all, err := base.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var first outcome
	for _, n := range []int{1, 2, 4} {
		res, deaths, made := runCrashing(t, n, true, cfg)
		if res.Stopped != StopDone || len(res.Findings) != 1 || res.Findings[0].Kind != KindKernel {
			t.Fatalf("%d workers: stopped %q, findings %+v: want one kernel finding and the search done", n, res.Stopped, res.Findings)
		}
		f := res.Findings[0]
		if last := f.Trace[len(f.Trace)-1]; last.GetMkdir().GetPath() != "d-00" {
			t.Errorf("finding's trace %v: want it to end in mkdir d-00", opKinds(f.Trace))
		}
		if f.Kernel == nil || f.Kernel.Title != crashReport.Title || len(f.Kernel.Trace) != 2 {
			t.Errorf("kernel finding's report %+v", f.Kernel)
		}
		for k, d := range deaths {
			if d > 1 {
				t.Errorf("%d workers: mkdir d-00 killed %d guests at state and op %x, want one", n, d, k)
			}
		}
		if made != n+sum(deaths) {
			t.Errorf("%d Systems made, want %d workers + %d deaths", made, n, sum(deaths))
		}
		for _, k := range res.StateKeys {
			if !slices.Contains(all.StateKeys, k) {
				t.Errorf("state %x reached with the crash, not without", k)
			}
		}
		if res.Unique >= all.Unique || res.Unique < 3 {
			t.Errorf("%d unique states with the crash, %d without: want fewer, and more than the root's children", res.Unique, all.Unique)
		}
		o := summarize(res)
		if n == 1 {
			first = o
		} else if !equalOutcome(o, first) {
			t.Errorf("%d workers: %+v, want (1 worker) %+v", n, o, first)
		}
		t.Logf("%d workers: %d states, %d unique (%d without the crash), %d deaths", n, res.States, res.Unique, all.Unique, sum(deaths))
	}
	// Without a report the death may be the worker's own: retried once,
	// then a guest-died finding that ends the search, as before.
	res, _, _ := runCrashing(t, 2, false, cfg)
	if res.Stopped != StopGuestDied || len(res.Findings) != 1 || res.Findings[0].Kind != KindGuestDied {
		t.Errorf("without a report: stopped %q, findings %+v: want guest-died", res.Stopped, res.Findings)
	}
}

// TestKernelCrashMinimized: after the search of TestKernelCrashGoesOn
// (with minimization on), the kernel finding goes through
// Config.Minimized minimized: its trace the one mkdir d-00 (every mkdir
// of d-00 crashes the toy kernel), its report kept.
func TestKernelCrashMinimized(t *testing.T) {
	t.Parallel()
	var got []Finding
	cfg := Config{Seed: 5, Depth: 3, Ops: []string{OpMkdir, OpCreateFile, OpRmdir}, Pool: PathPool{Files: 1, Dirs: 2, Depth: 1},
		Minimized: func(f Finding) { got = append(got, f) }}
	res, _, _ := runCrashing(t, 2, true, cfg)
	if res.Stopped != StopDone || len(res.Findings) != 1 || len(got) != 1 {
		t.Fatalf("stopped %q, findings %+v, minimized %+v: want one kernel finding minimized", res.Stopped, res.Findings, got)
	}
	f := got[0]
	if f.Kind != KindKernel || !f.Minimized || len(f.Trace) != 1 || f.Trace[0].GetMkdir().GetPath() != "d-00" || f.Kernel == nil || f.Kernel.Title != crashReport.Title {
		t.Errorf("minimized %v, trace %v, report %+v: want the one mkdir d-00 with the report", f.Minimized, describe(f.Trace), f.Kernel)
	}
}

// TestHungTaskConfirmed: a hung task report is a finding only when its
// hang recurs as its trace is replayed on a fresh System (a deadlock);
// one that does not (a host that did not run the emulator for 30 s) is
// counted in UnconfirmedHangs, not reported, and the op is not marked as
// killing the guest: the search applies it elsewhere and reaches more
// states than when every mkdir of d-00 hangs.
func TestHungTaskConfirmed(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 5, Depth: 3, Ops: []string{OpMkdir, OpCreateFile, OpRmdir}, Pool: PathPool{Files: 1, Dirs: 2, Depth: 1}, KeepStates: true, NoMinimize: true}
	always, deaths, _ := runDying(t, 2, crashingSystem{hang: true}, cfg)
	if always.Stopped != StopDone || len(always.Findings) != 1 || always.UnconfirmedHangs != 0 {
		t.Fatalf("every mkdir d-00 hangs: stopped %q, %d unconfirmed, findings %+v: want one kernel finding", always.Stopped, always.UnconfirmedHangs, always.Findings)
	}
	if f := always.Findings[0]; f.Kind != KindKernel || f.Kernel == nil || f.Kernel.Kind != kreport.HungTask {
		t.Errorf("finding %+v: want the hung task's kernel finding", f)
	}
	for k, d := range deaths {
		if d > 2 {
			t.Errorf("mkdir d-00 killed %d guests at state and op %x, want 2 (the hang and its replay)", d, k)
		}
	}
	once := 1
	res, _, made := runDying(t, 2, crashingSystem{hang: true, left: &once}, cfg)
	if res.Stopped != StopDone || len(res.Findings) != 0 || res.UnconfirmedHangs != 1 {
		t.Fatalf("one mkdir d-00 hangs: stopped %q, %d unconfirmed, findings %+v: want none found, one unconfirmed", res.Stopped, res.UnconfirmedHangs, res.Findings)
	}
	if made != 3 {
		t.Errorf("%d Systems made, want 2 workers + 1 replaced", made)
	}
	if res.Unique <= always.Unique {
		t.Errorf("%d unique states after an unconfirmed hang, %d when every mkdir d-00 hangs: want more", res.Unique, always.Unique)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestKernelCrashWithoutReplace: with one System and no Replace, a kernel
// crash is the "kernel" finding and ends the search (guest-died), as a
// death did before.
func TestKernelCrashWithoutReplace(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	sys := &crashingSystem{toySystem: newToy("", ""), report: true, mu: &mu, deaths: map[string]int{}}
	c, err := NewChecker(sys, Config{Seed: 5, Depth: 2, Ops: []string{OpMkdir}, Pool: PathPool{Dirs: 2, Depth: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Stopped != StopGuestDied || len(res.Findings) != 1 || res.Findings[0].Kind != KindKernel {
		t.Errorf("stopped %q, findings %+v", res.Stopped, res.Findings)
	}
	var kc *KernelCrash
	if !errors.As(&KernelCrash{Err: ErrGuestDied}, &kc) || !errors.Is(kc, ErrGuestDied) {
		t.Error("a KernelCrash is not an ErrGuestDied")
	}
}
