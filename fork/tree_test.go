package fork

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

const testPage = 64 // small pages keep the model test fast

// model is the naive reference: a full copy of RAM per checkpoint.
type model struct {
	ids   []ID
	snaps map[ID][]byte
}

// randomRAM is RAM of pages test pages filled with random bytes, or only its
// first half (populateLo), and the ranges to arm with (nil: all).
func randomRAM(rng *rand.Rand, pages int, populateLo bool) ([]byte, []Range) {
	mem := make([]byte, pages*testPage)
	if !populateLo {
		for i := range mem {
			mem[i] = byte(rng.Uint32())
		}
		return mem, nil
	}
	half := pages / 2 * testPage
	for i := range mem[:half] {
		mem[i] = byte(rng.Uint32())
	}
	return mem, []Range{{0, half}}
}

// restore restores the tree to the model's checkpoint k and checks RAM and
// the number of pages copied against the model.
func (m *model) restore(t *testing.T, tr *Tree, mem []byte, k, step int) {
	t.Helper()
	id := m.ids[k]
	bound := tr.Dirty().Len() // includes pages a deleted newest checkpoint handed back
	for _, c := range tr.path[k+1:] {
		bound += len(c.undo.pages)
	}
	copied, err := tr.Restore(id)
	if err != nil {
		t.Fatalf("step %d: Restore(%d): %v", step, id, err)
	}
	if copied > bound {
		t.Fatalf("step %d: Restore copied %d pages, more than the %d dirtied since", step, copied, bound)
	}
	for _, gone := range m.ids[k+1:] {
		delete(m.snaps, gone)
	}
	m.ids = m.ids[:k+1]
	if !bytes.Equal(mem, m.snaps[id]) {
		t.Fatalf("step %d: RAM after Restore(%d) differs from the checkpoint", step, id)
	}
}

func TestTreeAgainstModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		pages      int
		steps      int
		maxDirty   int
		pDelete    float64
		seed       uint64
		populateLo bool // arm with only the first half populated
	}{
		{"tiny", 4, 300, 3, 0.1, 1, false},
		{"small", 32, 500, 10, 0.15, 2, false},
		{"many-deletes", 16, 800, 6, 0.4, 3, false},
		{"sparse-arm", 64, 400, 20, 0.1, 4, true},
		{"wide", 512, 300, 200, 0.05, 5, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(tc.seed, 99))
			mem, arm := randomRAM(rng, tc.pages, tc.populateLo)
			tr, err := NewTree(mem, make([]byte, len(mem)), testPage)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Checkpoint(); !errors.Is(err, ErrNotArmed) {
				t.Fatalf("Checkpoint before Arm: got %v, want ErrNotArmed", err)
			}
			if err := tr.Arm(arm); err != nil {
				t.Fatal(err)
			}
			m := model{snaps: map[ID][]byte{}}
			dirtySinceTop := map[int]bool{} // model of what Dirty should contain at least
			for step := range tc.steps {
				switch op := rng.IntN(10); {
				case op < 5: // guest writes
					for range 1 + rng.IntN(tc.maxDirty) {
						p := rng.IntN(tc.pages)
						off := p*testPage + rng.IntN(testPage)
						mem[off] = byte(rng.Uint32())
						tr.Dirty().Add(p)
						dirtySinceTop[p] = true
					}
				case op < 7:
					id, err := tr.Checkpoint()
					if err != nil {
						t.Fatal(err)
					}
					m.ids = append(m.ids, id)
					m.snaps[id] = bytes.Clone(mem)
					clear(dirtySinceTop)
				case op < 9 && len(m.ids) > 0:
					m.restore(t, tr, mem, rng.IntN(len(m.ids)), step)
					clear(dirtySinceTop)
				case len(m.ids) > 0 && rng.Float64() < tc.pDelete*3:
					k := rng.IntN(len(m.ids))
					id := m.ids[k]
					if err := tr.Delete(id); err != nil {
						t.Fatalf("step %d: Delete(%d): %v", step, id, err)
					}
					delete(m.snaps, id)
					m.ids = append(m.ids[:k], m.ids[k+1:]...)
				}
				if got, want := fmt.Sprint(tr.Path()), fmt.Sprint(m.ids); got != want {
					t.Fatalf("step %d: path %s, want %s", step, got, want)
				}
			}
			// Finally every checkpoint still on the path restores exactly, newest first.
			for k := len(m.ids) - 1; k >= 0; k-- {
				if _, err := tr.Restore(m.ids[k]); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(mem, m.snaps[m.ids[k]]) {
					t.Fatalf("final Restore(%d) differs", m.ids[k])
				}
			}
		})
	}
}

// newArmedTree returns zeroed RAM of pages test pages and a tree over it, armed.
func newArmedTree(t *testing.T, pages int) ([]byte, *Tree) {
	t.Helper()
	mem := make([]byte, pages*testPage)
	tr, err := NewTree(mem, make([]byte, len(mem)), testPage)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Arm(nil); err != nil {
		t.Fatal(err)
	}
	return mem, tr
}

func TestTreeRestoreCopiesOnlyDirtied(t *testing.T) {
	t.Parallel()
	mem, tr := newArmedTree(t, 1000)
	c0, _ := tr.Checkpoint()
	write := func(ps ...int) {
		for _, p := range ps {
			mem[p*testPage]++
			tr.Dirty().Add(p)
		}
	}
	write(1, 2, 3)
	c1, _ := tr.Checkpoint()
	write(3, 4)
	_, _ = tr.Checkpoint()
	write(4, 5, 5, 6)
	tests := []struct {
		id   ID
		want int
	}{
		{c1, 4}, // pages 3 (changed before c2), 4, 5, 6; each once
		{c0, 3}, // pages 1, 2, 3
		{c0, 0}, // nothing dirtied since
		{ID(99), -1},
	}
	for _, tc := range tests {
		got, err := tr.Restore(tc.id)
		if tc.want < 0 {
			if !errors.Is(err, ErrUnknownCheckpoint) {
				t.Errorf("Restore(%d): got %v, want ErrUnknownCheckpoint", tc.id, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Restore(%d) = %d, %v; want %d", tc.id, got, err, tc.want)
		}
	}
}

func TestNewTreeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		mem, shadow int
		page        int
	}{
		{"page-not-pow2", 4096, 4096, 3000},
		{"ram-not-multiple", 5000, 5000, 4096},
		{"empty", 0, 0, 4096},
		{"shadow-size", 8192, 4096, 4096},
	}
	for _, tc := range tests {
		if _, err := NewTree(make([]byte, tc.mem), make([]byte, tc.shadow), tc.page); err == nil {
			t.Errorf("%s: NewTree succeeded", tc.name)
		}
	}
}

func TestSet(t *testing.T) {
	t.Parallel()
	s := NewSet(200)
	s.AddBitmap(0, []uint64{1<<0 | 1<<63, 1 << 2})
	s.Add(63)
	s.Add(199)
	if got, want := fmt.Sprint(s.Pages()), "[0 63 66 199]"; got != want {
		t.Errorf("Pages = %s, want %s", got, want)
	}
	s.Reset()
	if s.Len() != 0 || s.Has(63) {
		t.Errorf("Reset left %v", s.Pages())
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	a, b := []byte("ab"), []byte("c")
	if Hash(a, b) == Hash([]byte("a"), []byte("bc")) {
		t.Error("Hash does not separate regions")
	}
	if Hash(a, b) != Hash(bytes.Clone(a), bytes.Clone(b)) {
		t.Error("Hash not deterministic")
	}
}

// BenchmarkTreeRestore measures the pure page copy: restore after n dirtied pages.
func BenchmarkTreeRestore(b *testing.B) {
	const ramPages = 64 << 10 // 256 MiB of 4 KiB pages
	mem := make([]byte, ramPages*4096)
	tr, err := NewTree(mem, make([]byte, len(mem)), 4096)
	if err != nil {
		b.Fatal(err)
	}
	if err := tr.Arm(nil); err != nil {
		b.Fatal(err)
	}
	id, _ := tr.Checkpoint()
	for _, n := range []int{1, 10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("pages=%d", n), func(b *testing.B) {
			for b.Loop() {
				for i := range n {
					p := i * 5 % ramPages
					mem[p*4096]++
					tr.Dirty().Add(p)
				}
				if _, err := tr.Restore(id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTreeParallelCopyBack: a restore of many dirtied pages (the parallel
// copy path) puts back exactly the checkpoint's RAM.
func TestTreeParallelCopyBack(t *testing.T) {
	t.Parallel()
	const pages = 8192
	mem := make([]byte, pages*testPage)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	tr, err := NewTree(mem, make([]byte, len(mem)), testPage)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Arm([]Range{{Off: 0, Len: len(mem)}}); err != nil {
		t.Fatal(err)
	}
	c0, _ := tr.Checkpoint()
	want := Hash(mem)
	for _, n := range []int{parallelPages - 1, parallelPages * 3, pages} {
		for p := range n {
			mem[p*testPage+p%testPage] ^= 0xff
			tr.Dirty().Add(p)
		}
		got, err := tr.Restore(c0)
		if err != nil || got != n {
			t.Fatalf("Restore after %d dirtied pages = %d, %v", n, got, err)
		}
		if Hash(mem) != want {
			t.Fatalf("RAM after restoring %d dirtied pages differs from the checkpoint", n)
		}
	}
}

// BenchmarkCopyBack compares the serial and the parallel copy of scattered
// dirtied pages side by side (run with -cpu 2 or more).
func BenchmarkCopyBack(b *testing.B) {
	const pages = 1 << 16 // 256 MiB of 4 KiB pages
	mem := make([]byte, pages*4096)
	shadow := make([]byte, len(mem))
	for _, n := range []int{1000, 10000} {
		for _, w := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("pages=%d/workers=%d", n, w), func(b *testing.B) {
				old := maxCopyWorkers
				maxCopyWorkers = w
				defer func() { maxCopyWorkers = old }()
				tr, err := NewTree(mem, shadow, 4096)
				if err != nil {
					b.Fatal(err)
				}
				list := make([]uint32, n)
				for i := range list {
					list[i] = uint32((i * 7919) % pages) // scattered
				}
				b.ResetTimer()
				for range b.N {
					if err := tr.copyBack(list); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/page")
			})
		}
	}
}

// TestTreeOnShadowWrite: a copy of the shadow kept up to date only through
// the OnShadowWrite hook stays equal to the shadow over random checkpoints,
// restores and deletes.
func TestTreeOnShadowWrite(t *testing.T) {
	t.Parallel()
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 7))
		const pages = 32
		mem, tr := newArmedTree(t, pages)
		mirror := bytes.Clone(tr.shadow)
		tr.OnShadowWrite(func(p uint32) { copy(tr.page(mirror, p), tr.page(tr.shadow, p)) })
		for step := range 300 {
			path := tr.Path()
			switch op := rng.IntN(8); {
			case op < 4:
				p := rng.IntN(pages)
				mem[p*testPage+rng.IntN(testPage)]++
				tr.Dirty().Add(p)
			case op < 6:
				if _, err := tr.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			case op == 6 && len(path) > 0:
				if _, err := tr.Restore(path[rng.IntN(len(path))]); err != nil {
					t.Fatal(err)
				}
			case len(path) > 0:
				if err := tr.Delete(path[rng.IntN(len(path))]); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(mirror, tr.shadow) {
				t.Fatalf("seed %d step %d: the copy kept through OnShadowWrite differs from the shadow", seed, step)
			}
		}
	}
}
