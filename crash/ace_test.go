package crash

import (
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/opspec"
)

// TestAceWorkloads: seq1 is every (core op, persistence op) step once,
// each parsing as an op; seq2 is every ordered pair of steps, in order;
// max cuts the list and says so; unknown names and bounds are refused.
func TestAceWorkloads(t *testing.T) {
	t.Parallel()
	seq1, cut, err := AceWorkloads("ace:seq1", 0)
	if err != nil || cut {
		t.Fatal(err, cut)
	}
	steps := aceSteps()
	if len(seq1) != len(steps) || len(seq1) < 60 {
		t.Fatalf("seq1: %d workloads for %d steps", len(seq1), len(steps))
	}
	seen := map[string]bool{}
	for _, w := range append(slices.Clone(seq1), AceSetup) {
		for _, op := range w {
			if _, err := opspec.Parse(op); err != nil {
				t.Errorf("%q: %v", op, err)
			}
		}
		d := Describe(w)
		if seen[d] {
			t.Errorf("workload %s twice", d)
		}
		seen[d] = true
	}
	for _, w := range seq1 {
		last := w[len(w)-1]
		if !strings.HasPrefix(last, "fsync") && !strings.HasPrefix(last, "fdatasync") && last != "sync" {
			t.Errorf("%s: does not end in a persistence op", Describe(w))
		}
	}
	seq2, cut, err := AceWorkloads("ace:seq2", 0)
	if err != nil || cut || len(seq2) != len(steps)*len(steps) {
		t.Fatalf("seq2: %d workloads (cut %v, %v), want %d", len(seq2), cut, err, len(steps)*len(steps))
	}
	if got, want := Describe(seq2[len(steps)+1]), Describe(append(slices.Clone(seq1[1]), seq1[1]...)); got != want {
		t.Errorf("seq2[%d] = %s, want %s", len(steps)+1, got, want)
	}
	some, cut, err := AceWorkloads("ace:seq2", 10)
	if err != nil || !cut || len(some) != 10 {
		t.Errorf("seq2 max 10: %d, cut %v, %v", len(some), cut, err)
	}
	for _, tt := range []struct {
		name string
		max  int
	}{{"ace:seq3", 0}, {"ace", 0}, {"ace:seq1", -1}, {"ace:seq1", MaxAceWorkloads + 1}} {
		if _, _, err := AceWorkloads(tt.name, tt.max); err == nil {
			t.Errorf("AceWorkloads(%q, %d): no error", tt.name, tt.max)
		}
	}
	t.Logf("ace:seq1: %d workloads; ace:seq2: %d", len(seq1), len(seq2))
}
