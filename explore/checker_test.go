package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func create(p string, mode uint32) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Path: p, Flags: oCreat | oWronly, Mode: mode}}}
}

func truncate(p string, n int64) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Path: p, Length: n}}}
}

func chmod(p string, mode uint32) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Chmod{Chmod: &agentv1.Chmod{Path: p, Mode: mode}}}
}

func write(p string, off, size int64) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: p, Flags: oRdwr, Offset: off, Size: size, Fill: 0x55}}}
}

func TestPlantedBugs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		bug       string
		cfg       Config
		wantKind  string
		wantOps   []string // op kinds of the minimized trace
		wantField string
	}{
		{
			name: "truncate past 64 KiB keeps 64 KiB",
			bug:  "truncate-cap",
			cfg: Config{Depth: 2, Branching: 100, Ops: []string{OpCreateFile, OpTruncate, OpChmod},
				Pool: PathPool{Files: 1, Depth: 1}},
			wantKind: KindState, wantOps: []string{OpCreateFile, OpTruncate}, wantField: "size",
		},
		{
			name: "rmdir of a non-empty directory succeeds",
			bug:  "rmdir-nonempty",
			cfg: Config{Depth: 3, Branching: 20, Ops: []string{OpMkdir, OpRmdir},
				Pool: PathPool{Dirs: 1, Depth: 2}},
			wantKind: KindErrno, wantOps: []string{OpMkdir, OpMkdir, OpRmdir},
		},
		{
			name: "link does not count links",
			bug:  "link-nlink",
			cfg: Config{Depth: 2, Branching: 40, Ops: []string{OpCreateFile, OpLink},
				Pool: PathPool{Files: 2, Depth: 1}},
			wantKind: KindState, wantOps: []string{OpCreateFile, OpLink}, wantField: "nlink",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sys := newToy("", tt.bug)
			tt.cfg.Seed = 7
			c, err := NewChecker(sys, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var f *Finding
			for i := range res.Findings {
				if res.Findings[i].Kind == tt.wantKind {
					f = &res.Findings[i]
					break
				}
			}
			if f == nil {
				t.Fatalf("no %s finding among %+v", tt.wantKind, res.Findings)
			}
			if got := opKinds(f.Trace); !slices.Equal(got, tt.wantOps) {
				t.Errorf("minimized trace %v, want %v", got, tt.wantOps)
			}
			if !f.Minimized || f.Seed != 7 || f.OriginalLen < len(f.Trace) {
				t.Errorf("minimized %v seed %d original %d", f.Minimized, f.Seed, f.OriginalLen)
			}
			if f.Field != tt.wantField {
				t.Errorf("field %q, want %q (detail %q)", f.Field, tt.wantField, f.Detail)
			}
			if len(f.Lanes) != 2 || f.Detail == "" {
				t.Errorf("lanes %v detail %q", f.Lanes, f.Detail)
			}
			if len(sys.stack) != 0 {
				t.Errorf("%d checkpoints left", len(sys.stack))
			}
			// The minimized trace reproduces from a fresh System.
			fresh := newToy("", tt.bug)
			root, _ := fresh.Checkpoint(context.Background())
			out, err := Replay(context.Background(), fresh, root, f.Trace)
			if err != nil {
				t.Fatal(err)
			}
			last := out.Results[len(out.Results)-1]
			if tt.wantKind == KindErrno && last[0].Errno == last[1].Errno {
				t.Errorf("replayed errnos agree: %v", last)
			}
			if tt.wantKind == KindState && !divergent(out.States) {
				t.Error("replayed states agree")
			}
		})
	}
}

func TestCorrectLanesNoFindings(t *testing.T) {
	t.Parallel()
	sys := newToy("", "")
	c, err := NewChecker(sys, Config{Depth: 3, Branching: 20, Seed: 3, ReplaySample: 10, Pool: PathPool{Files: 2, Dirs: 1, Depth: 2}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 0 {
		t.Errorf("findings on identical lanes: %+v", res.Findings)
	}
	if res.Stopped != StopDone || res.MaxDepthReached != 3 || res.States == 0 || res.Unique < 2 || res.Unique > res.States+1 {
		t.Errorf("result %+v", res)
	}
	if len(sys.stack) != 0 {
		t.Errorf("%d checkpoints left", len(sys.stack))
	}
}

// TestMinimizeFinding shrinks a padded trace through the Checker's own
// reproduction of a state divergence.
func TestMinimizeFinding(t *testing.T) {
	t.Parallel()
	sys := newToy("", "truncate-cap")
	c, err := NewChecker(sys, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	root, _ := sys.Checkpoint(ctx)
	s := newSearch(c)
	w := &worker{s: s, sys: sys, root: root}
	trace := []*agentv1.Request{chmod("f-00", 0o600), create("f-00", 0o644), write("f-00", 4, 100),
		chmod("f-00", 0o777), truncate("f-00", 65537), chmod("f-01", 0o600)}
	f := Finding{Kind: KindState, Trace: trace, OriginalLen: len(trace)}
	if err := s.minimize(ctx, w, &f); err != nil {
		t.Fatal(err)
	}
	if got := opKinds(f.Trace); !slices.Equal(got, []string{OpCreateFile, OpTruncate}) || !f.Minimized || f.OriginalLen != 6 {
		t.Errorf("got %v minimized %v original %d", got, f.Minimized, f.OriginalLen)
	}
	if f.Path != "f-00" || f.Field != "size" || !strings.Contains(f.Detail, "65537") {
		t.Errorf("path %q field %q detail %q", f.Path, f.Field, f.Detail)
	}
}

// TestDeterminism: the same seed gives the same sequence of ops and roots;
// another seed a different one.
func TestDeterminism(t *testing.T) {
	t.Parallel()
	trace := func(seed uint64, ops []string) ([]string, []byte, int) {
		sys := newToy("", "")
		sys.record = true
		c, err := NewChecker(sys, Config{Seed: seed, Depth: 3, Branching: 12, Ops: ops, Pool: PathPool{Files: 2, Dirs: 1, Depth: 1}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return sys.log, res.Digest, res.Unique
	}
	tests := []struct {
		a, b uint64
		ops  []string
		same bool
	}{
		{1, 1, nil, true},
		{42, 42, nil, true},
		{1, 2, nil, false},
		{0, 1 << 63, nil, false},
		{5, 5, AllOps, true},
		{5, 6, AllOps, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%d-%d", tt.a, tt.b, len(tt.ops)), func(t *testing.T) {
			t.Parallel()
			la, da, ua := trace(tt.a, tt.ops)
			lb, db, ub := trace(tt.b, tt.ops)
			if got := slices.Equal(la, lb); got != tt.same {
				t.Errorf("logs equal = %v, want %v", got, tt.same)
			}
			if got := string(da) == string(db); got != tt.same {
				t.Errorf("digests equal = %v, want %v", got, tt.same)
			}
			if tt.same && ua != ub {
				t.Errorf("unique %d != %d", ua, ub)
			}
		})
	}
}

// cancelSystem cancels its context after n applies.
type cancelSystem struct {
	*toySystem
	n      int
	cancel context.CancelFunc
}

func (s *cancelSystem) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	if s.applies == s.n {
		s.cancel()
	}
	return s.toySystem.Apply(ctx, op)
}

// dyingSystem reports a dead guest on its n-th apply.
type dyingSystem struct {
	*toySystem
	n int
}

func (s *dyingSystem) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	if s.applies+1 == s.n {
		return nil, fmt.Errorf("agent silent for 10s: %w", ErrGuestDied)
	}
	return s.toySystem.Apply(ctx, op)
}

func TestBudgets(t *testing.T) {
	t.Parallel()
	stopAfter := func(n int) func() bool {
		calls := 0
		return func() bool { calls++; return calls > n }
	}
	tests := []struct {
		name        string
		cfg         Config
		sys         func(context.CancelFunc) System
		wantStopped string
		wantStates  int // -1: any > 0
		wantLeft    bool
	}{
		{"max states", Config{MaxStates: 7}, nil, StopBudget, 7, false},
		{"max states at depth 3", Config{Depth: 3, MaxStates: 30, Pool: PathPool{Files: 1, Dirs: 1, Depth: 1}}, nil, StopBudget, 30, false},
		{"stop func", Config{Stop: stopAfter(10)}, nil, StopRequested, 10, false},
		{"cancel", Config{}, func(c context.CancelFunc) System {
			return &cancelSystem{toySystem: newToy(""), n: 5, cancel: c}
		}, StopCancelled, 5, true},
		{"guest dies", Config{}, func(context.CancelFunc) System {
			return &dyingSystem{toySystem: newToy(""), n: 9}
		}, StopGuestDied, 8, true},
		{"max findings", Config{MaxFindings: 1, Ops: []string{OpCreateFile, OpTruncate}, Branching: 100, Pool: PathPool{Files: 1, Depth: 1}}, func(context.CancelFunc) System {
			return newToy("", "truncate-cap")
		}, StopFindings, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var sys System = newToy("")
			if tt.sys != nil {
				sys = tt.sys(cancel)
			}
			var progress []Progress
			tt.cfg.Progress = func(p Progress) { progress = append(progress, p) }
			tt.cfg.ProgressEvery = 3
			c, err := NewChecker(sys, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stopped != tt.wantStopped {
				t.Errorf("stopped %q, want %q", res.Stopped, tt.wantStopped)
			}
			if tt.wantStates >= 0 && res.States != tt.wantStates || res.States == 0 {
				t.Errorf("states %d, want %d", res.States, tt.wantStates)
			}
			if len(progress) == 0 || progress[len(progress)-1].States != res.States {
				t.Errorf("progress %v, final states %d", progress, res.States)
			}
			var left int
			switch s := sys.(type) {
			case *toySystem:
				left = len(s.stack)
			case *cancelSystem:
				left = len(s.stack)
			case *dyingSystem:
				left = len(s.stack)
				if len(res.Findings) != 1 || res.Findings[0].Kind != KindGuestDied || len(res.Findings[0].Trace) == 0 {
					t.Errorf("findings %+v, want one guest-died", res.Findings)
				}
			}
			if (left > 0) != tt.wantLeft {
				t.Errorf("%d checkpoints left", left)
			}
		})
	}
}

// errSystem fails Fingerprint after n applies.
type errSystem struct {
	*toySystem
	n int
}

func (s *errSystem) Fingerprint(ctx context.Context) ([]LaneState, error) {
	if s.applies >= s.n {
		return nil, errors.New("disk on fire")
	}
	return s.toySystem.Fingerprint(ctx)
}

func TestSystemErrorIsAnError(t *testing.T) {
	t.Parallel()
	c, err := NewChecker(&errSystem{toySystem: newToy(""), n: 3}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || res == nil || res.States != 3 {
		t.Errorf("err %v res %+v", err, res)
	}
}

func TestRootDivergence(t *testing.T) {
	t.Parallel()
	sys := newToy("", "")
	sys.lanes[1].names["lost+found"] = &inode{kind: agentv1.Kind_KIND_DIRECTORY, mode: 0o700}
	c, err := NewChecker(sys, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.States != 0 || len(res.Findings) != 1 || res.Findings[0].Kind != KindState || res.Findings[0].Path != "" || res.Findings[0].Field != "nlink" {
		t.Errorf("result %+v", res)
	}
}

// TestChecks: a single-lane self-reference plugged in through Config.Checks
// is found and minimized by replaying it (ddmin is 1-minimal: "create 0600;
// chmod 0777" cannot lose an op, though "create 0777" is shorter).
func TestChecks(t *testing.T) {
	t.Parallel()
	var calls int
	worldWritable := func(ctx context.Context, sys System, trace []*agentv1.Request) (*Finding, error) {
		calls++
		leaves, err := sys.Leaves(ctx, "lane0")
		if err != nil {
			return nil, err
		}
		for _, e := range leaves {
			if e.Path != "" && e.Mode == 0o777 {
				return &Finding{Kind: "self-reference:test", Path: e.Path, Detail: "world-writable"}, nil
			}
		}
		return nil, nil
	}
	sys := newToy("")
	c, err := NewChecker(sys, Config{Depth: 3, Branching: 30, Seed: 5, Checks: []Check{worldWritable},
		Ops: []string{OpCreateFile, OpChmod, OpTruncate}, Pool: PathPool{Files: 1, Depth: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 1 {
		t.Fatalf("findings %+v", res.Findings)
	}
	f := res.Findings[0]
	if f.Kind != "self-reference:test" || !f.Minimized || len(f.Trace) == 0 || len(f.Trace) > 2 || OpKind(f.Trace[0]) != OpCreateFile || f.Path != "f-00" {
		t.Errorf("finding %+v (trace %v)", f, opKinds(f.Trace))
	}
	if calls < res.Unique {
		t.Errorf("check ran %d times for %d unique states", calls, res.Unique)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sys  System
		cfg  Config
		want string // substring of the error, "" for none
	}{
		{"defaults", newToy(""), Config{}, ""},
		{"nil system", nil, Config{}, "nil System"},
		{"depth negative", newToy(""), Config{Depth: -1}, "depth -1"},
		{"depth too deep", newToy(""), Config{Depth: 11}, "depth 11"},
		{"depth max", newToy(""), Config{Depth: 10}, ""},
		{"branching negative", newToy(""), Config{Branching: -3}, "branching -3"},
		{"branching too wide", newToy(""), Config{Branching: 1001}, "branching 1001"},
		{"max states negative", newToy(""), Config{MaxStates: -1}, "max states"},
		{"max findings negative", newToy(""), Config{MaxFindings: -1}, "max findings"},
		{"replay sample negative", newToy(""), Config{ReplaySample: -1}, "replay sample"},
		{"minimize budget negative", newToy(""), Config{MinimizeBudget: -1}, "minimize budget"},
		{"progress negative", newToy(""), Config{ProgressEvery: -1}, "progress interval"},
		{"nil check", newToy(""), Config{Checks: []Check{nil}}, "check 0 is nil"},
		{"unknown op", newToy(""), Config{Ops: []string{"mknod"}}, `unknown op "mknod"`},
		{"op twice", newToy(""), Config{Ops: []string{OpMkdir, OpMkdir}}, "listed twice"},
		{"unknown weight", newToy(""), Config{Weights: map[string]float64{"mknod": 1}}, `unknown op "mknod"`},
		{"op sets", newToy(""), Config{Ops: []string{OpSetMetis, OpSetPersistence}}, ""},
		{"op in a set twice", newToy(""), Config{Ops: []string{OpSetMetis, OpChmod}}, `"chmod" listed twice`},
		{"negative weight", newToy(""), Config{Weights: map[string]float64{OpMkdir: -1}}, "weight -1"},
		{"all weights zero", newToy(""), Config{Ops: []string{OpMkdir}, Weights: map[string]float64{OpMkdir: 0}}, "no op kind enabled"},
		{"pool files", newToy(""), Config{Pool: PathPool{Files: 101, Depth: 1}}, "pool files 101"},
		{"pool empty", newToy(""), Config{Pool: PathPool{Depth: 1}}, "no files and no dirs"},
		{"pool depth", newToy(""), Config{Pool: PathPool{Files: 1, Depth: 5}}, "pool depth 5"},
		{"pool bias", newToy(""), Config{Pool: PathPool{Files: 1, Depth: 1, FileBias: 1.5}}, "file bias"},
		{"pool too big", newToy(""), Config{Pool: PathPool{Files: 10, Dirs: 20, Depth: 4}}, "more than"},
		{"mkdir without dirs", newToy(""), Config{Pool: PathPool{Files: 1, Depth: 1}}, `"mkdir" needs dirs`},
		{"create without files", newToy(""), Config{Pool: PathPool{Dirs: 1, Depth: 1}}, `"create_file" needs files`},
		{"dirs only ok", newToy(""), Config{Pool: PathPool{Dirs: 1, Depth: 1}, Ops: []string{OpMkdir, OpRmdir, OpChmod}}, ""},
		{"max length", newToy(""), Config{MaxLength: -5}, "max length -5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewChecker(tt.sys, tt.cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.want == "":
				cfg := c.Config()
				if cfg.Depth < 1 || cfg.Branching < 1 || cfg.Generator == nil {
					t.Errorf("defaults not filled: %+v", cfg)
				}
			case err == nil:
				t.Fatalf("no error, want %q", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}
