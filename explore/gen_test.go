package explore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	g, err := NewMetisGenerator(GenConfig{Ops: AllOps})
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
				offsets := lengths
				if OpKind(op) == OpWriteFar {
					offsets = FarLengths // and no O_APPEND: it would write at the end
					if w.Flags&oCreat == 0 {
						ok = false // a far write makes its file
					}
					extra &^= oCreat
				}
				ok = ok && isFile(w.Path) && w.Flags&oRdwr != 0 && (extra == 0 || extra == oAppend && OpKind(op) == OpWriteFile || extra == oSync) &&
					slices.Contains(offsets, w.Offset) && slices.Contains(lengths, w.Size) && slices.Contains(Fills, w.Fill)
			}
			if tr := op.GetTruncate(); tr != nil {
				ok = isFile(tr.Path) && (slices.Contains(lengths, tr.Length) || OpKind(op) == OpTruncateFar && slices.Contains(FarLengths, tr.Length))
			}
			if c := op.GetChown(); c != nil {
				ok = isAny(c.Path) && (c.Uid == -1) != (c.Gid == -1) && (slices.Contains(IDs, c.Uid) || slices.Contains(IDs, c.Gid))
			}
			if x := op.GetSetxattr(); x != nil {
				ok = isAny(x.Path) && slices.Contains(XattrNames, x.Name) && x.Flags == xattrCreate && string(x.Value) == string(XattrValue)
			}
			if rn := op.GetRename(); rn != nil {
				// exchange swaps any two paths; the others move a file
				// to a file or a dir to a dir.
				ok = isAny(rn.Path) && isAny(rn.NewPath) && (rn.Flags == renameExchange || isFile(rn.Path) == isFile(rn.NewPath)) &&
					slices.Contains([]uint32{0, renameNoreplace, renameExchange, renameWhiteout}, rn.Flags)
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
			if f := op.GetFsync(); f != nil {
				ok = isAny(f.Path)
			}
			if s := op.GetSync(); s != nil {
				ok = proto.Equal(s, &agentv1.Sync{})
			}
			if !ok {
				t.Errorf("op out of bins: %v", op)
			}
		}
	}
	for _, k := range AllOps {
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

// treeState is a small first-lane state: a file, a dir holding a file, a
// symlink.
var treeState = []*agentv1.Entry{
	{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY},
	{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY},
	{Path: "d-00/f-01", Kind: agentv1.Kind_KIND_REGULAR},
	{Path: "f-00", Kind: agentv1.Kind_KIND_REGULAR},
	{Path: "f-02", Kind: agentv1.Kind_KIND_SYMLINK},
}

// TestDrawEveryKind: every draw, plain or state-aware, opens with one op of
// every enabled kind (weight 0 disables a kind), then fills with distinct
// extra draws up to n; n below the number of kinds still gives every kind
// its op; the persistence kinds come only when enabled.
func TestDrawEveryKind(t *testing.T) {
	t.Parallel()
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(MetisOps), func(k string) bool { return slices.Contains(drop, k) })
	}
	tests := []struct {
		name    string
		cfg     GenConfig
		n       int
		kinds   []string // the enabled kinds
		wantLen int
	}{
		{"default, n below the kinds", GenConfig{}, DefaultBranching, MetisOps, len(MetisOps)},
		{"default, n of 1", GenConfig{}, 1, MetisOps, len(MetisOps)},
		{"default, n = kinds", GenConfig{}, len(MetisOps), MetisOps, len(MetisOps)},
		{"default, extras", GenConfig{}, 40, MetisOps, 40},
		{"subset, extras", GenConfig{Ops: []string{OpMkdir, OpChmod}}, 5, []string{OpMkdir, OpChmod}, 5},
		{"weight 0", GenConfig{Weights: map[string]float64{OpRename: 0, OpLink: 0}}, 30, without(OpRename, OpLink), 30},
		{"metis and persistence", GenConfig{Ops: []string{OpSetMetis, OpSetPersistence}}, DefaultBranching, slices.Concat(MetisOps, PersistenceOps), len(MetisOps) + len(PersistenceOps)},
		{"every kind", GenConfig{Ops: AllOps}, DefaultBranching, AllOps, len(AllOps)},
		{"metis and rename flags", GenConfig{Ops: []string{OpSetMetis, OpSetRenameFlags}}, 1, slices.Concat(MetisOps, RenameFlagOps), len(MetisOps) + len(RenameFlagOps)},
		{"metis and fsync", GenConfig{Ops: []string{OpSetMetis, OpFsync}}, 20, append(slices.Clone(MetisOps), OpFsync), 20},
		{"persistence only", GenConfig{Ops: PersistenceOps}, 1, PersistenceOps, 3},
	}
	states := map[string][]*agentv1.Entry{"empty root": {{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY}}, "tree": treeState}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := NewMetisGenerator(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Kinds(); !slices.Equal(got, tt.kinds) {
				t.Fatalf("Kinds() = %v, want %v", got, tt.kinds)
			}
			for pos := range uint64(50) {
				draws := map[string][]*agentv1.Request{"Draw": g.Draw(rand.New(rand.NewPCG(pos, 7)), tt.n)}
				for name, st := range states {
					draws["DrawAt "+name] = g.DrawAt(rand.New(rand.NewPCG(pos, 7)), tt.n, st)
				}
				for name, ops := range draws {
					if err := checkEveryKind(ops, tt.kinds, tt.wantLen); err != nil {
						t.Fatalf("%s, stream %d: %v", name, pos, err)
					}
				}
			}
		})
	}
}

// checkEveryKind: ops are wantLen distinct ops of the given kinds, the
// first len(kinds) of them one of each.
func checkEveryKind(ops []*agentv1.Request, kinds []string, wantLen int) error {
	if len(ops) != wantLen {
		return fmt.Errorf("%d ops, want %d", len(ops), wantLen)
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[opKey(op)] {
			return fmt.Errorf("duplicate op %v", op)
		}
		seen[opKey(op)] = true
		if !slices.Contains(kinds, OpKind(op)) {
			return fmt.Errorf("op %v of a kind not enabled", op)
		}
	}
	first := opKinds(ops[:len(kinds)])
	slices.Sort(first)
	if want := slices.Sorted(slices.Values(kinds)); !slices.Equal(first, want) {
		return fmt.Errorf("first %d ops are of kinds %v, want one of each of %v", len(kinds), first, want)
	}
	return nil
}

// TestExtraDrawsFollowWeights: past the op every kind gets, the draws go
// by weight.
func TestExtraDrawsFollowWeights(t *testing.T) {
	t.Parallel()
	g, err := NewMetisGenerator(GenConfig{Weights: map[string]float64{OpMkdir: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	mkdirs, extras := 0, 0
	for pos := range uint64(50) {
		ops := g.DrawAt(rand.New(rand.NewPCG(pos, 1)), len(MetisOps)+10, treeState)
		for _, op := range ops[len(MetisOps):] {
			extras++
			if OpKind(op) == OpMkdir {
				mkdirs++
			}
		}
	}
	// 13 in 1013 of the draws are of other kinds.
	if extras != 500 || float64(mkdirs)/float64(extras) < 0.95 {
		t.Errorf("%d of %d extra draws are mkdir, want 500 extras, nearly all mkdir", mkdirs, extras)
	}
}

// TestDrawDeterministic: the same stream gives the same ops, another stream
// others.
func TestDrawDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ops []string
		n   int
	}{
		{nil, DefaultBranching},
		{nil, 40},
		{AllOps, 1},
		{AllOps, 30},
	}
	for _, tt := range tests {
		g, err := NewMetisGenerator(GenConfig{Ops: tt.ops})
		if err != nil {
			t.Fatal(err)
		}
		keys := func(a, b uint64, state []*agentv1.Entry) string {
			var k []string
			for _, op := range g.DrawAt(rand.New(rand.NewPCG(a, b)), tt.n, state) {
				k = append(k, opKey(op))
			}
			return strings.Join(k, "|")
		}
		for _, st := range [][]*agentv1.Entry{nil, treeState} {
			if keys(9, 9, st) != keys(9, 9, st) {
				t.Errorf("ops %v, n %d: same stream, different ops", tt.ops, tt.n)
			}
			if keys(9, 9, st) == keys(9, 10, st) {
				t.Errorf("ops %v, n %d: another stream, the same ops", tt.ops, tt.n)
			}
		}
	}
}

func TestOpKindPersistence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op   *agentv1.Request
		want string
	}{
		{&agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: "f-00"}}}, OpFsync},
		{&agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: "f-00", Datasync: true}}}, OpFdatasync},
		{&agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}, OpSync},
	}
	for _, tt := range tests {
		if got := OpKind(tt.op); got != tt.want {
			t.Errorf("OpKind(%v) = %q, want %q", tt.op, got, tt.want)
		}
	}
}

// TestFarLengths: far lengths are ascending, above every small length a
// generator may draw (so OpKind tells the kinds apart), and hold each
// limit's neighbours.
func TestFarLengths(t *testing.T) {
	t.Parallel()
	if !slices.IsSorted(FarLengths) {
		t.Errorf("FarLengths not ascending: %v", FarLengths)
	}
	maxSmall := slices.Max(Lengths(1 << 30))
	if FarLengths[0] <= maxSmall || FarLengths[0] < farFloor {
		t.Errorf("least far length %d not above the largest small one %d and farFloor %d", FarLengths[0], maxSmall, farFloor)
	}
	for _, want := range []int64{1<<42 - 1024, 1 << 42, 1<<42 + 1, 1<<32 - 1, 1<<63 - 1} {
		if !slices.Contains(FarLengths, want) {
			t.Errorf("FarLengths lacks %d", want)
		}
	}
	for _, tt := range []struct {
		op   *agentv1.Request
		want string
	}{
		{&agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Offset: 1<<30 + 1}}}, OpWriteFile},
		{&agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Offset: FarLengths[0]}}}, OpWriteFar},
		{&agentv1.Request{Op: &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Length: maxSmall}}}, OpTruncate},
		{&agentv1.Request{Op: &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Length: 1<<63 - 1}}}, OpTruncateFar},
	} {
		if got := OpKind(tt.op); got != tt.want {
			t.Errorf("OpKind(%v) = %s, want %s", tt.op, got, tt.want)
		}
	}
}

// TestRenameFlagsTakeDirectories: the renameat2 kinds take a directory
// about a third of the time (renameFlagBias), plain rename Metis's one in
// twenty.
func TestRenameFlagsTakeDirectories(t *testing.T) {
	g, err := NewMetisGenerator(GenConfig{Ops: []string{OpRename, OpRenameWhiteout, OpRenameExchange}})
	if err != nil {
		t.Fatal(err)
	}
	_, dirs := DefaultPool.Paths()
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 2000
	for _, tc := range []struct {
		kind     string
		min, max float64
	}{{OpRename, 0.02, 0.08}, {OpRenameWhiteout, 0.28, 0.39}, {OpRenameExchange, 0.28, 0.39}} {
		taken := 0
		for range n {
			if slices.Contains(dirs, g.build(rng, tc.kind).GetRename().GetPath()) {
				taken++
			}
		}
		if f := float64(taken) / n; f < tc.min || f > tc.max {
			t.Errorf("%s: a directory in %.3f of %d draws, want %.2f..%.2f", tc.kind, f, n, tc.min, tc.max)
		}
	}
}

// TestAnyPathYieldsToWhatExists: at a state of directories only, an op on
// any path takes a directory (not a file that is not there); at a state of
// files only, a file.
func TestAnyPathYieldsToWhatExists(t *testing.T) {
	g, err := NewMetisGenerator(GenConfig{Ops: []string{OpRename, OpRenameWhiteout}})
	if err != nil {
		t.Fatal(err)
	}
	files, dirs := DefaultPool.Paths()
	dir := func(p string) *agentv1.Entry { return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_DIRECTORY} }
	file := func(p string) *agentv1.Entry { return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_REGULAR} }
	for _, tc := range []struct {
		name  string
		state []*agentv1.Entry
		want  []string
	}{
		{"directories only", []*agentv1.Entry{dir("d-00"), dir("d-01"), dir("d-00/d-00")}, dirs},
		{"files only", []*agentv1.Entry{file("f-00"), file("f-01")}, files},
	} {
		rng := rand.New(rand.NewPCG(5, 6))
		for range 50 {
			for _, op := range g.DrawAt(rng, 4, tc.state) {
				if src := op.GetRename().GetPath(); !slices.Contains(tc.want, src) {
					t.Errorf("%s: %v takes %q", tc.name, op, src)
				}
			}
		}
	}
}
