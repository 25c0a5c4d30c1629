package explore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func TestLengths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		max  int64
		want []int64
	}{
		{1, []int64{0, 1, 2}},
		{4, []int64{0, 1, 2, 3, 4, 5}},
		{5, []int64{0, 1, 2, 3, 4, 5}},
		{8, []int64{0, 1, 2, 3, 4, 5, 7, 8, 9}},
	}
	for _, tt := range tests {
		if got := Lengths(tt.max); !slices.Equal(got, tt.want) {
			t.Errorf("Lengths(%d) = %v, want %v", tt.max, got, tt.want)
		}
	}
	l := Lengths(DefaultMaxLength)
	if len(l) != 48 || l[len(l)-1] != 65537 || !slices.Contains(l, 65535) || !slices.Contains(l, 4097) {
		t.Errorf("Lengths(65536) = %v", l)
	}
}

func TestPoolPaths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pool       PathPool
		files      []string
		dirs       []string
		wantCounts [2]int
	}{
		{PathPool{Files: 1, Depth: 1}, []string{"f-00"}, nil, [2]int{1, 0}},
		{PathPool{Files: 1, Dirs: 1, Depth: 2}, []string{"f-00", "d-00/f-00"}, []string{"d-00", "d-00/d-00"}, [2]int{2, 2}},
		{DefaultPool, nil, nil, [2]int{9, 6}},
	}
	for _, tt := range tests {
		files, dirs := tt.pool.Paths()
		if tt.files != nil && !slices.Equal(files, tt.files) || tt.dirs != nil && !slices.Equal(dirs, tt.dirs) {
			t.Errorf("%+v: files %v dirs %v", tt.pool, files, dirs)
		}
		if len(files) != tt.wantCounts[0] || len(dirs) != tt.wantCounts[1] {
			t.Errorf("%+v: %d files %d dirs, want %v", tt.pool, len(files), len(dirs), tt.wantCounts)
		}
	}
}

// TestGeneratorBins: every drawn op is well formed and its arguments come
// from the bins and the pool; every enabled kind shows up; draws are
// distinct and reproducible.
func TestGeneratorBins(t *testing.T) {
	t.Parallel()
	g, err := NewMetisGenerator(GenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	files, dirs := DefaultPool.Paths()
	isFile := func(p string) bool { return slices.Contains(files, p) }
	isAny := func(p string) bool { return isFile(p) || slices.Contains(dirs, p) }
	lengths := Lengths(DefaultMaxLength)
	kinds := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ops := g.Draw(rng, 50)
		if len(ops) != 50 {
			t.Fatalf("drew %d ops, want 50", len(ops))
		}
		keys := map[string]bool{}
		for _, op := range ops {
			if keys[opKey(op)] {
				t.Fatalf("duplicate op %v", op)
			}
			keys[opKey(op)] = true
			kinds[OpKind(op)]++
			ok := true
			if c := op.GetCreate(); c != nil {
				extra := c.Flags &^ (oCreat | oWronly)
				ok = isFile(c.Path) && c.Flags&(oCreat|oWronly) == oCreat|oWronly && (extra == 0 || extra == oExcl || extra == oTrunc) && slices.Contains(Modes, c.Mode)
			}
			if w := op.GetWrite(); w != nil {
				extra := w.Flags &^ oRdwr
				ok = isFile(w.Path) && w.Flags&oRdwr != 0 && (extra == 0 || extra == oAppend || extra == oSync) &&
					slices.Contains(lengths, w.Offset) && slices.Contains(lengths, w.Size) && slices.Contains(Fills, w.Fill)
			}
			if tr := op.GetTruncate(); tr != nil {
				ok = isFile(tr.Path) && slices.Contains(lengths, tr.Length)
			}
			if c := op.GetChown(); c != nil {
				ok = isAny(c.Path) && (c.Uid == -1) != (c.Gid == -1) && (slices.Contains(IDs, c.Uid) || slices.Contains(IDs, c.Gid))
			}
			if x := op.GetSetxattr(); x != nil {
				ok = isAny(x.Path) && slices.Contains(XattrNames, x.Name) && x.Flags == xattrCreate && string(x.Value) == string(XattrValue)
			}
			if rn := op.GetRename(); rn != nil {
				ok = isFile(rn.Path) == isFile(rn.NewPath) && isAny(rn.Path) && isAny(rn.NewPath)
			}
			if l := op.GetLink(); l != nil {
				ok = isFile(l.Path) && isFile(l.NewPath)
			}
			if s := op.GetSymlink(); s != nil {
				ok = isAny(s.Target) && isFile(s.Path)
			}
			if m := op.GetMkdir(); m != nil {
				ok = slices.Contains(dirs, m.Path) && slices.Contains(Modes, m.Mode)
			}
			if !ok {
				t.Errorf("op out of bins: %v", op)
			}
		}
	}
	for _, k := range MetisOps {
		if kinds[k] == 0 {
			t.Errorf("op kind %s never drawn", k)
		}
	}
	a := g.Draw(rand.New(rand.NewPCG(9, 9)), 12)
	b := g.Draw(rand.New(rand.NewPCG(9, 9)), 12)
	if !slices.EqualFunc(a, b, func(x, y *agentv1.Request) bool { return proto.Equal(x, y) }) {
		t.Error("same stream, different draws")
	}
}

func TestGeneratorWeightsAndSmallSpace(t *testing.T) {
	t.Parallel()
	g, err := NewMetisGenerator(GenConfig{Ops: []string{OpUnlink, OpRmdir}, Weights: map[string]float64{OpRmdir: 0},
		Pool: PathPool{Files: 2, Dirs: 1, Depth: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ops := g.Draw(rand.New(rand.NewPCG(1, 1)), 10)
	// The space holds two ops (unlink f-00, unlink f-01): Draw stops there.
	if len(ops) != 2 {
		t.Fatalf("drew %v", ops)
	}
	for _, op := range ops {
		if OpKind(op) != OpUnlink {
			t.Errorf("weight 0 kind drawn: %v", op)
		}
	}
}

func TestMinimizeIsOneMinimal(t *testing.T) {
	t.Parallel()
	for trial := range 200 {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(trial), 3))
			n := rng.IntN(12)
			items := rng.Perm(n)
			// fails: the candidate holds every element of need, or (with an
			// alternative) every element of alt.
			need := rng.Perm(n)[:rng.IntN(n+1)]
			alt := rng.Perm(n)[:rng.IntN(n+1)]
			holds := func(c []int) bool {
				all := func(s []int) bool {
					for _, x := range s {
						if !slices.Contains(c, x) {
							return false
						}
					}
					return true
				}
				return all(need) || trial%2 == 0 && all(alt)
			}
			calls := 0
			got, err := Minimize(context.Background(), items, func(_ context.Context, c []int) (bool, error) {
				calls++
				return holds(c), nil
			}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !holds(got) {
				t.Fatalf("result %v does not fail", got)
			}
			// 1-minimal: dropping any one element passes.
			for i := range got {
				if holds(slices.Delete(slices.Clone(got), i, i+1)) {
					t.Errorf("items %v: result %v is not 1-minimal (drop %d)", items, got, got[i])
				}
			}
			// A subsequence of the input, in input order.
			j := 0
			for _, x := range got {
				for j < len(items) && items[j] != x {
					j++
				}
				if j == len(items) {
					t.Fatalf("result %v is not a subsequence of %v", got, items)
				}
			}
			if trial%2 == 1 && len(got) != len(need) {
				t.Errorf("result %v, want the %d elements of %v", got, len(need), need)
			}
		})
	}
}

func TestMinimizeBudgetAndErrors(t *testing.T) {
	t.Parallel()
	items := []int{0, 1, 2, 3, 4, 5, 6, 7}
	fails := func(_ context.Context, c []int) (bool, error) {
		return slices.Contains(c, 3) && slices.Contains(c, 6), nil
	}
	got, err := Minimize(context.Background(), items, fails, 2)
	if !errors.Is(err, ErrBudget) || len(got) > len(items) {
		t.Errorf("budget 2: %v, %v", got, err)
	}
	boom := errors.New("boom")
	_, err = Minimize(context.Background(), items, func(context.Context, []int) (bool, error) { return false, boom }, 0)
	if !errors.Is(err, boom) {
		t.Errorf("error not passed on: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Minimize(ctx, items, fails, 0)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if got, err := Minimize(context.Background(), items, fails, 0); err != nil || !slices.Equal(got, []int{3, 6}) {
		t.Errorf("got %v, %v", got, err)
	}
}
