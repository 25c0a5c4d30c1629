package explore

import (
	"math/rand/v2"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestDrawAtFitsTheState: in a state-aware draw the op every kind gets
// names an object that exists for ops that need one and a path whose
// parent exists for ops that create; the extra draws mostly do, and still
// sometimes draw from the whole pool.
func TestDrawAtFitsTheState(t *testing.T) {
	t.Parallel()
	g, err := NewMetisGenerator(GenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	state := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY},
		{Path: "f-01", Kind: agentv1.Kind_KIND_REGULAR},
		{Path: "d-01", Kind: agentv1.Kind_KIND_DIRECTORY},
	}
	type tally struct{ writes, writesFit, creates, createsFit int }
	var kindOps, extras tally // the ops every kind gets, the extra draws
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		for i, op := range g.DrawAt(rng, 40, state) {
			c := &extras
			if i < len(MetisOps) {
				c = &kindOps
			}
			switch o := op.GetOp().(type) {
			case *agentv1.Request_Write:
				c.writes++
				if o.Write.GetPath() == "f-01" {
					c.writesFit++
				}
			case *agentv1.Request_Create:
				c.creates++
				p := o.Create.GetPath()
				if p != "f-01" && (!strings.Contains(p, "/") || strings.HasPrefix(p, "d-01/")) {
					c.createsFit++
				}
			}
		}
	}
	if kindOps.writes != 200 || kindOps.creates != 200 {
		t.Errorf("every kind's op: %d writes, %d creates in 200 draws, want 200 of each", kindOps.writes, kindOps.creates)
	}
	if kindOps.writesFit != kindOps.writes || kindOps.createsFit != kindOps.creates {
		t.Errorf("every kind's op: %d of %d writes to the existing file, %d of %d creates under an existing parent, want all",
			kindOps.writesFit, kindOps.writes, kindOps.createsFit, kindOps.creates)
	}
	if extras.writes == 0 || extras.creates == 0 {
		t.Fatalf("no extra writes (%d) or creates (%d) drawn", extras.writes, extras.creates)
	}
	if fit := float64(extras.writesFit) / float64(extras.writes); fit < 0.6 || fit == 1 {
		t.Errorf("extra writes to the existing file: %.2f of %d, want mostly but not all", fit, extras.writes)
	}
	if fit := float64(extras.createsFit) / float64(extras.creates); fit < 0.6 || fit == 1 {
		t.Errorf("extra creates under an existing parent: %.2f of %d, want mostly but not all", fit, extras.creates)
	}
	// Plain Draw is unchanged by a previous DrawAt.
	a := g.Draw(rand.New(rand.NewPCG(3, 4)), 12)
	g2, _ := NewMetisGenerator(GenConfig{})
	b := g2.Draw(rand.New(rand.NewPCG(3, 4)), 12)
	for i := range a {
		if opKey(a[i]) != opKey(b[i]) {
			t.Fatalf("Draw after DrawAt differs at %d", i)
		}
	}
}
