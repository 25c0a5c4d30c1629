package explore

import (
	"math/rand/v2"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestDrawAtFitsTheState: a state-aware draw mostly names objects that
// exist for ops that need them and paths whose parent exists for ops that
// create, and still sometimes draws from the whole pool.
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
	rng := rand.New(rand.NewPCG(1, 2))
	var writes, writesFit, creates, createsFit int
	for range 200 {
		for _, op := range g.DrawAt(rng, 12, state) {
			switch o := op.GetOp().(type) {
			case *agentv1.Request_Write:
				writes++
				if o.Write.GetPath() == "f-01" {
					writesFit++
				}
			case *agentv1.Request_Create:
				creates++
				p := o.Create.GetPath()
				if p != "f-01" && (!strings.Contains(p, "/") || strings.HasPrefix(p, "d-01/")) {
					createsFit++
				}
			}
		}
	}
	if writes == 0 || creates == 0 {
		t.Fatalf("no writes (%d) or creates (%d) drawn", writes, creates)
	}
	if fit := float64(writesFit) / float64(writes); fit < 0.6 || fit == 1 {
		t.Errorf("writes to the existing file: %.2f of %d, want mostly but not all", fit, writes)
	}
	if fit := float64(createsFit) / float64(creates); fit < 0.6 || fit == 1 {
		t.Errorf("creates under an existing parent: %.2f of %d, want mostly but not all", fit, creates)
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
