package explore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBuildRegrow: a regrow is a write from 0 with O_CREAT and a fill that
// is not zero, a truncate inside it, at times an append at the cut, and a
// grow past the file's end by a truncate or a write, in the append's mount
// when there is one; the burst's kind is regrow, its ops' kinds are plain.
func TestBuildRegrow(t *testing.T) {
	t.Parallel()
	lengths := Lengths(DefaultMaxLength)
	grows, appends := map[string]int{}, 0
	for seed := range uint64(200) {
		op := buildRegrow(rand.New(rand.NewPCG(seed, 1)), "f", lengths)
		if k := OpKind(op); k != OpRegrow {
			t.Fatalf("seed %d: kind %q, want %q", seed, k, OpRegrow)
		}
		ops := Steps(op)
		if len(ops) != 3 && len(ops) != 4 {
			t.Fatalf("seed %d: %d ops, want 3 or 4", seed, len(ops))
		}
		w, cut := ops[0].GetWrite(), ops[1].GetTruncate()
		switch {
		case w == nil || w.GetPath() != "f" || w.GetOffset() != 0 || w.GetFlags()&oCreat == 0 || w.GetFill() == 0 || w.GetSize() < 2:
			t.Errorf("seed %d: first op %v, want a write of f from 0 with O_CREAT, a fill and 2 bytes or more", seed, ops[0])
		case cut == nil || cut.GetLength() < 1 || cut.GetLength() >= w.GetSize():
			t.Errorf("seed %d: second op %v, want a truncate inside the %d bytes written", seed, ops[1], w.GetSize())
		}
		end := cut.GetLength()
		if len(ops) == 4 {
			appends++
			a := ops[2].GetWrite()
			if a == nil || a.GetOffset() != end || a.GetSize() < 1 || a.GetFill() == 0 || SharesMount(ops[2]) {
				t.Errorf("seed %d: third op %v, want an append at the cut %d on a fresh mount", seed, ops[2], end)
			}
			end += a.GetSize()
		}
		g := ops[len(ops)-1]
		if SharesMount(g) != (len(ops) == 4) || SharesMount(ops[0]) || SharesMount(ops[1]) {
			t.Errorf("seed %d: ops %v: want only a grow after an append in the mount of the op before", seed, ops)
		}
		grows[OpKind(g)]++
		switch OpKind(g) {
		case OpTruncate:
			if g.GetTruncate().GetLength() <= end {
				t.Errorf("seed %d: grow %v not past the end %d", seed, g, end)
			}
		case OpWriteFile:
			if g.GetWrite().GetOffset() <= end || g.GetWrite().GetSize() < 1 || g.GetWrite().GetFill() == 0 {
				t.Errorf("seed %d: grow %v not a write past the end %d", seed, g, end)
			}
		default:
			t.Errorf("seed %d: grow of kind %q", seed, OpKind(g))
		}
		if k := opKinds(ops); !slices.Equal(k[:2], []string{OpWriteFile, OpTruncate}) {
			t.Errorf("seed %d: op kinds %v", seed, k)
		}
	}
	if grows[OpTruncate] == 0 || grows[OpWriteFile] == 0 || appends == 0 || appends == 200 {
		t.Errorf("grows %v, %d of 200 with an append: want both grows, with an append and without", grows, appends)
	}
}

// TestRegrowFinding: a lane that shows the bytes a truncate cut off when
// the file grows back (the toy's "stale-tail") diverges at depth 1 with
// the regrow op, and not at depth 1 without it (a plain write, truncate
// and grow take three).
func TestRegrowFinding(t *testing.T) {
	t.Parallel()
	run := func(ops []string) *Result {
		return mustCheck(t, newToy("", "stale-tail"), Config{Seed: 1, Depth: 1, Ops: ops})
	}
	with := run(append(slices.Clone(MetisOps), OpRegrow))
	i := slices.IndexFunc(with.Findings, func(f Finding) bool { return f.Kind == KindState })
	if i < 0 {
		t.Fatalf("with regrow: no state finding in %d findings", len(with.Findings))
	}
	if f := with.Findings[i]; f.Field != "content" || len(f.Trace) != 3 || OpKind(f.Trace[1]) != OpTruncate {
		t.Errorf("finding %s on %v (%v): want the content after a write, truncate and grow", f.Field, opKinds(f.Trace), f.Detail)
	}
	if without := run(MetisOps); len(without.Findings) != 0 {
		t.Errorf("without regrow, depth 1: %d findings, want 0", len(without.Findings))
	}
}
