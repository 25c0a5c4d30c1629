package explore

import (
	"bytes"
	"context"
	"testing"
)

// TestLazyRestore: on the toy system, lazy restores reach the same unique
// states (a failed op changes nothing there) with fewer restores.
func TestLazyRestore(t *testing.T) {
	t.Parallel()
	run := func(lazy bool) (*Result, int) {
		sys := newToy("", "")
		c, err := NewChecker(sys, Config{Depth: 3, Branching: 12, Seed: 5, LazyRestore: lazy})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res, sys.restores
	}
	eager, eagerRestores := run(false)
	lazy, lazyRestores := run(true)
	if eager.Unique != lazy.Unique || !bytes.Equal(eager.Digest, lazy.Digest) {
		t.Errorf("lazy restores changed the search: unique %d vs %d", eager.Unique, lazy.Unique)
	}
	if lazy.RestoresSkipped == 0 || lazyRestores >= eagerRestores {
		t.Errorf("restores: eager %d, lazy %d (skipped %d); want fewer", eagerRestores, lazyRestores, lazy.RestoresSkipped)
	}
	if eager.RestoresSkipped != 0 {
		t.Errorf("eager run skipped %d restores", eager.RestoresSkipped)
	}
}
