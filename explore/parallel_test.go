package explore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// jitterSystem is a toy System whose Apply sleeps a random while (seeded
// per run), so that workers interleave differently from run to run, and
// that can die once at its dieAt-th Apply (ErrGuestDied).
type jitterSystem struct {
	*toySystem
	rng   *rand.Rand
	dieAt int // 0: never
	dead  bool
}

func (j *jitterSystem) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	if j.dead {
		return nil, fmt.Errorf("jitter: %w", ErrGuestDied)
	}
	if j.dieAt > 0 && j.applies+1 == j.dieAt {
		j.dead = true
		return nil, fmt.Errorf("jitter: died at apply %d: %w", j.dieAt, ErrGuestDied)
	}
	if j.rng != nil {
		time.Sleep(time.Duration(j.rng.IntN(200)) * time.Microsecond)
	}
	return j.toySystem.Apply(ctx, op)
}

// outcome is what must not depend on the number of workers.
type outcome struct {
	unique   int
	byDepth  []int
	digest   string
	findings []string // kind, signature and minimized trace of each, sorted
	stopped  string
}

func summarize(res *Result) outcome {
	o := outcome{unique: res.Unique, byDepth: res.UniqueByDepth, digest: fmt.Sprintf("%x", res.Digest), stopped: res.Stopped}
	for _, f := range res.Findings {
		o.findings = append(o.findings, fmt.Sprintf("%s %s %s", f.Kind, f.sig, strings.Join(opKeysOf(f.Trace), ";")))
	}
	sort.Strings(o.findings)
	return o
}

// runWorkers runs cfg over n jittered toy Systems of bugs, each worker's
// applies counted; die makes worker 0 die at its die-th Apply (0: never),
// replaced by a fresh System when replace is set.
func runWorkers(t *testing.T, n int, jitter uint64, bugs []string, cfg Config, die int, replace bool) (*Result, []int) {
	t.Helper()
	var mu sync.Mutex
	var all []*jitterSystem
	mk := func(i int) *jitterSystem {
		mu.Lock()
		defer mu.Unlock()
		j := &jitterSystem{toySystem: newToy(bugs...), rng: rand.New(rand.NewPCG(jitter, uint64(len(all))))}
		all = append(all, j)
		return j
	}
	var w Workers
	for i := range n {
		w.Systems = append(w.Systems, mk(i))
	}
	all[0].dieAt = die
	if replace {
		w.Replace = func(_ context.Context, i int, dead System) (System, error) {
			if !dead.(*jitterSystem).dead {
				t.Errorf("worker %d replaced while alive", i)
			}
			return mk(i), nil
		}
	}
	c, err := NewParallelChecker(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var applies []int
	for _, j := range all {
		applies = append(applies, j.applies)
		if !j.dead && len(j.stack) != 0 && res.Stopped == StopDone {
			t.Errorf("a System holds %d checkpoints after a complete search", len(j.stack))
		}
	}
	return res, applies
}

// TestParallelSameSearch: for one seed and config, 1, 2 and 4 workers
// reach the same unique states, digest and findings, whatever the timing
// (three jitter seeds each); with more than one worker, every worker
// applies ops.
func TestParallelSameSearch(t *testing.T) {
	t.Parallel()
	pool := PathPool{Files: 2, Dirs: 1, Depth: 1}
	for _, tc := range []struct {
		name string
		bugs []string
		cfg  Config
	}{
		{"two correct lanes", []string{"", ""}, Config{Seed: 7, Depth: 3, Pool: pool}},
		{"truncate-cap", []string{"", "truncate-cap"}, Config{Seed: 3, Depth: 3, Branching: 12,
			Ops: []string{OpCreateFile, OpTruncate, OpChmod}, Pool: PathPool{Files: 2, Depth: 1}}},
		{"truncate-cap as found", []string{"", "truncate-cap"}, Config{Seed: 3, Depth: 3, Branching: 12, NoMinimize: true,
			Ops: []string{OpCreateFile, OpTruncate, OpChmod}, Pool: PathPool{Files: 2, Depth: 1}}},
		{"rmdir-nonempty and link-nlink", []string{"", "rmdir-nonempty", "link-nlink"}, Config{Seed: 9, Depth: 3, Branching: 12,
			Ops: []string{OpMkdir, OpRmdir, OpCreateFile, OpLink}, Pool: PathPool{Files: 2, Dirs: 1, Depth: 2}}},
		{"replay samples", []string{""}, Config{Seed: 11, Depth: 3, Pool: pool, ReplaySample: 8, Ops: AllOps}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want, _ := runWorkers(t, 1, 0, tc.bugs, tc.cfg, 0, false)
			if want.Unique < 10 {
				t.Fatalf("only %d unique states: too small a search to tell", want.Unique)
			}
			if buggy := slices.ContainsFunc(tc.bugs, func(b string) bool { return b != "" }); buggy && len(want.Findings) == 0 {
				t.Fatal("no findings over a buggy lane: nothing to compare")
			}
			base := summarize(want)
			t.Logf("1 worker: %d unique, %d states, %d findings", want.Unique, want.States, len(want.Findings))
			for _, n := range []int{2, 4} {
				for jitter := range uint64(3) {
					res, applies := runWorkers(t, n, jitter+1, tc.bugs, tc.cfg, 0, false)
					if got := summarize(res); !equalOutcome(got, base) {
						t.Errorf("%d workers (jitter %d): %+v\nwant (1 worker) %+v", n, jitter, got, base)
					}
					if slices.Contains(applies, 0) {
						t.Errorf("%d workers (jitter %d): applies per worker %v: one did nothing", n, jitter, applies)
					}
				}
			}
		})
	}
}

func equalOutcome(a, b outcome) bool {
	return a.unique == b.unique && slices.Equal(a.byDepth, b.byDepth) && a.digest == b.digest && a.stopped == b.stopped && slices.Equal(a.findings, b.findings)
}

// TestParallelWorkerDies: a worker whose guest dies mid-search hands its
// item back and gets a fresh System; the search ends as if nothing had
// happened. Without Replace the death is a finding that ends the search.
func TestParallelWorkerDies(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 5, Depth: 3, Pool: PathPool{Files: 2, Dirs: 1, Depth: 1}}
	bugs := []string{"", "truncate-cap"}
	want, _ := runWorkers(t, 1, 0, bugs, cfg, 0, false)
	for _, n := range []int{1, 2} {
		for _, die := range []int{1, 10, 40} {
			res, applies := runWorkers(t, n, uint64(die), bugs, cfg, die, true)
			if got := summarize(res); !equalOutcome(got, summarize(want)) {
				t.Errorf("%d workers, worker 0 dead at apply %d and replaced: %+v\nwant %+v", n, die, got, summarize(want))
			}
			if len(applies) != n+1 {
				t.Errorf("%d workers, dead at %d: %d Systems used, want %d (one replacement)", n, die, len(applies), n+1)
			}
		}
	}
	res, _ := runWorkers(t, 2, 9, bugs, cfg, 30, false)
	if res.Stopped != StopGuestDied || !slices.ContainsFunc(res.Findings, func(f Finding) bool { return f.Kind == KindGuestDied }) {
		t.Errorf("without Replace: stopped %q, findings %v; want guest-died", res.Stopped, res.Findings)
	}
}

// TestParallelStops: a budget or a cancel stops every worker, and a run
// that stopped early says so.
func TestParallelStops(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 5, Depth: 3, Pool: PathPool{Files: 2, Dirs: 1, Depth: 1}, MaxStates: 40}
	res, applies := runWorkers(t, 3, 1, []string{""}, cfg, 0, false)
	if res.Stopped != StopBudget || res.States < 40 || res.States > 40+3 {
		t.Errorf("budget 40 over 3 workers: stopped %q after %d states (applies %v)", res.Stopped, res.States, applies)
	}
	var ws Workers
	for range 2 {
		ws.Systems = append(ws.Systems, &cancelAfter{toySystem: newToy(""), n: 25})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, s := range ws.Systems {
		s.(*cancelAfter).cancel = cancel
	}
	c, err := NewParallelChecker(ws, Config{Seed: 5, Depth: 3, Pool: PathPool{Files: 2, Dirs: 1, Depth: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res, err = c.Run(ctx)
	if err != nil || res.Stopped != StopCancelled {
		t.Errorf("cancelled: %v, stopped %q", err, res.Stopped)
	}
}

// cancelAfter cancels the run's context at its n-th Apply.
type cancelAfter struct {
	*toySystem
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	if c.applies+1 == c.n {
		c.cancel()
	}
	return c.toySystem.Apply(ctx, op)
}

// TestParallelRootMismatch: a worker that starts in another state is an
// error naming it.
func TestParallelRootMismatch(t *testing.T) {
	t.Parallel()
	other := newToy("")
	if _, err := other.Apply(context.Background(), create("f-00", 0o644)); err != nil {
		t.Fatal(err)
	}
	c, err := NewParallelChecker(Workers{Systems: []System{newToy(""), other}}, Config{Seed: 1, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "worker 1 starts in another state") {
		t.Errorf("mismatched roots: %v", err)
	}
	if _, err := NewParallelChecker(Workers{}, Config{}); err == nil || errors.Is(err, nil) {
		t.Error("no Systems accepted")
	}
}
