package overlay

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestMirrorCrashView: a second device over the same base, mirrored from
// crash views of the first (several in turn, the spare's own history
// included), reads exactly as each view.
func TestMirrorCrashView(t *testing.T) {
	t.Parallel()
	const size = 64 * SectorSize
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 5))
		base := randomBase(r, size)
		lane, spare := newTestDevice(t, base), newTestDevice(t, base)
		for range 3 {
			off, n := randomRange(r, size)
			if _, err := lane.WriteAt(randomBase(r, n), int64(off)); err != nil {
				t.Fatal(err)
			}
			lane.Push()
		}
		if err := lane.StartLog(); err != nil {
			t.Fatal(err)
		}
		var writes int
		for range 6 {
			off, n := randomRange(r, size)
			if _, err := lane.WriteAt(randomBase(r, n), int64(off)); err != nil {
				t.Fatal(err)
			}
			writes++
		}
		// the spare's own writes (a mount's journal replay) and a checkpoint
		off, n := randomRange(r, size)
		if _, err := spare.WriteAt(randomBase(r, n), int64(off)); err != nil {
			t.Fatal(err)
		}
		spare.Push()
		for round := range 4 {
			var keep []int
			for i := range writes {
				if r.IntN(2) == 0 {
					keep = append(keep, i)
				}
			}
			v, err := lane.CrashView(keep)
			if err != nil {
				t.Fatal(err)
			}
			if err := spare.Mirror(v); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readAll(t, spare, size), readAll(t, v, size)) {
				t.Fatalf("seed %d round %d: the spare does not read as the crash view keeping %v", seed, round, keep)
			}
			off, n := randomRange(r, size)
			if _, err := spare.WriteAt(randomBase(r, n), int64(off)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMirrorSizes: a source of another size is refused.
func TestMirrorSizes(t *testing.T) {
	t.Parallel()
	a, b := newTestDevice(t, make([]byte, 8*SectorSize)), newTestDevice(t, make([]byte, 16*SectorSize))
	if err := a.StartLog(); err != nil {
		t.Fatal(err)
	}
	v, err := a.CrashView(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Mirror(v); err == nil {
		t.Error("mirror of an 8-sector view into a 16-sector device: no error")
	}
}
