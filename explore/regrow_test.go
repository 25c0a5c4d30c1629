package explore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBuildRegrow: a regrow is a write from 0 with O_CREAT and a fill that
// is not zero, a truncate inside it, and a grow past the cut by a truncate
// or a write; the burst's kind is regrow, its ops' kinds are plain.
func TestBuildRegrow(t *testing.T) {
	t.Parallel()
	lengths := Lengths(DefaultMaxLength)
	grows := map[string]int{}
	for seed := range uint64(200) {
		op := buildRegrow(rand.New(rand.NewPCG(seed, 1)), "f", lengths)
		if k := OpKind(op); k != OpRegrow {
			t.Fatalf("seed %d: kind %q, want %q", seed, k, OpRegrow)
		}
		ops := Steps(op)
		if len(ops) != 3 {
			t.Fatalf("seed %d: %d ops, want 3", seed, len(ops))
		}
		w, cut := ops[0].GetWrite(), ops[1].GetTruncate()
		switch {
		case w == nil || w.GetPath() != "f" || w.GetOffset() != 0 || w.GetFlags()&oCreat == 0 || w.GetFill() == 0 || w.GetSize() < 2:
			t.Errorf("seed %d: first op %v, want a write of f from 0 with O_CREAT, a fill and 2 bytes or more", seed, ops[0])
		case cut == nil || cut.GetLength() < 1 || cut.GetLength() >= w.GetSize():
			t.Errorf("seed %d: second op %v, want a truncate inside the %d bytes written", seed, ops[1], w.GetSize())
		}
		grows[OpKind(ops[2])]++
		switch g := ops[2]; OpKind(g) {
		case OpTruncate:
			if g.GetTruncate().GetLength() <= cut.GetLength() {
				t.Errorf("seed %d: grow %v not past the cut %d", seed, g, cut.GetLength())
			}
		case OpWriteFile:
			if g.GetWrite().GetOffset() <= cut.GetLength() || g.GetWrite().GetSize() < 1 || g.GetWrite().GetFill() == 0 {
				t.Errorf("seed %d: grow %v not a write past the cut %d", seed, g, cut.GetLength())
			}
		default:
			t.Errorf("seed %d: grow of kind %q", seed, OpKind(g))
		}
		if k := opKinds(ops); !slices.Equal(k[:2], []string{OpWriteFile, OpTruncate}) {
			t.Errorf("seed %d: op kinds %v", seed, k)
		}
	}
	if grows[OpTruncate] == 0 || grows[OpWriteFile] == 0 {
		t.Errorf("grows %v: want both a truncate and a write", grows)
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
