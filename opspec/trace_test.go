package opspec_test

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
)

// TestParseTraceRoundTrip: every op the generator draws reads back from
// FormatTrace's text as the same request (explore merge compares shards'
// traces through it).
func TestParseTraceRoundTrip(t *testing.T) {
	g, err := explore.NewMetisGenerator(explore.GenConfig{Ops: explore.AllOps})
	if err != nil {
		t.Fatal(err)
	}
	ops := g.Draw(rand.New(rand.NewPCG(1, 2)), 300)
	back, err := opspec.ParseTrace(opspec.FormatTrace(ops))
	if err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		if !proto.Equal(ops[i], back[i]) {
			t.Errorf("op %d: %v read back as %v", i, ops[i], back[i])
		}
	}
	if _, err := opspec.ParseTrace([]string{"mkdir"}); err == nil {
		t.Error("a bad op read back")
	}
}
