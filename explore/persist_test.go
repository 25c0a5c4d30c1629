package explore

import (
	"math/rand/v2"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestPersistTakesWhatChanged: a persistence op takes a path made or
// changed since the root about changedBias of the time (here: the new
// f-03, the grown f-00 and the directory d-00 that holds a new entry),
// the rest any path; at the root itself nothing has changed. An access
// time alone is no change.
func TestPersistTakesWhatChanged(t *testing.T) {
	gen := func() *MetisGenerator {
		g, err := NewMetisGenerator(GenConfig{Ops: []string{OpFsync, OpFdatasync}})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	file := func(p string, size int64, mtime int64) *agentv1.Entry {
		return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_REGULAR, Size: size, Mtime: &agentv1.Timespec{Sec: mtime}}
	}
	dir := func(p string, mtime int64) *agentv1.Entry {
		return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_DIRECTORY, Mtime: &agentv1.Timespec{Sec: mtime}}
	}
	read := file("f-01", 9, 1)
	read.Atime = &agentv1.Timespec{Sec: 9}
	same := []*agentv1.Entry{dir("d-01", 1), dir("d-02", 1), file("d-01/f-01", 3, 1), file("d-02/f-02", 3, 1), file("f-02", 1, 1), file("f-04", 1, 1)}
	root := append([]*agentv1.Entry{dir("", 1), dir("d-00", 1), file("f-00", 10, 1), file("f-01", 9, 1)}, same...)
	later := append([]*agentv1.Entry{dir("", 1), dir("d-00", 2), file("d-00/f-00", 0, 2), file("f-00", 20, 2), read, file("f-03", 5, 2)}, same...)
	changed := map[string]bool{"d-00": true, "d-00/f-00": true, "f-00": true, "f-03": true}
	count := func(g *MetisGenerator, state []*agentv1.Entry) (hits, all int) {
		rng := rand.New(rand.NewPCG(3, 4))
		for range 400 {
			for _, op := range g.DrawAt(rng, 2, state) {
				all++
				if changed[op.GetFsync().GetPath()] {
					hits++
				}
			}
		}
		return hits, all
	}
	g := gen()
	count(g, root) // the first state: the root
	hits, all := count(g, later)
	// The same state as its own root: nothing changed, the draws are
	// every other op's (which favour what exists, so these paths too).
	base, baseAll := count(gen(), later)
	share, baseShare := float64(hits)/float64(all), float64(base)/float64(baseAll)
	if share < baseShare+0.25 || share < changedBias {
		t.Errorf("%d of %d persistence ops on a changed path (%.2f), %.2f with nothing changed: want about %v more", hits, all, share, baseShare, changedBias)
	}
	if got := changedSince(g.root, later); len(got) != len(changed) {
		t.Errorf("changed since the root: %q, want %d paths (not the one only read, not the root directory)", got, len(changed))
	}
}
