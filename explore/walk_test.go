package explore

import (
	"bytes"
	"testing"
)

// TestWalks: on the toy system, walks reach depth 8 with about Walks ops
// per level (a full tree to depth 8 would be 14^8), the same seed gives
// the same walks, another seed other ones, and a plain search at the same
// depth and a walk search differ only in what they cover.
func TestWalks(t *testing.T) {
	t.Parallel()
	run := func(seed uint64, walks int) *Result {
		return mustCheck(t, newToy("", ""), Config{Depth: 8, Seed: seed, Walks: walks})
	}
	a, again, other := run(5, 20), run(5, 20), run(6, 20)
	if a.MaxDepthReached != 8 {
		t.Errorf("walks reached depth %d, want 8", a.MaxDepthReached)
	}
	if a.States > 20*8 || a.States < 20 {
		t.Errorf("walks applied %d ops, want between 20 (the root's) and 20 walks of 8", a.States)
	}
	for d, n := range a.UniqueByDepth {
		if d > 0 && n > 20 {
			t.Errorf("%d unique states at depth %d: more than one per walk", n, d)
		}
	}
	if !bytes.Equal(a.Digest, again.Digest) || a.States != again.States {
		t.Error("the same seed walked other walks")
	}
	if bytes.Equal(a.Digest, other.Digest) {
		t.Error("another seed walked the same walks")
	}
	if _, err := NewChecker(newToy("", ""), Config{Walks: -1}); err == nil {
		t.Error("negative walks accepted")
	}
}
