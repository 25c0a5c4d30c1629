package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/themisfs/themis/internal/budget"

	"github.com/zeebo/blake3"
)

// model is the naive reference: the current image as a plain []byte and a
// stack of copies taken at each Push.
type model struct {
	cur   []byte
	snaps [][]byte
}

func (m *model) push() { m.snaps = append(m.snaps, bytes.Clone(m.cur)) }

func (m *model) pop() {
	m.cur = m.snaps[len(m.snaps)-1]
	m.snaps = m.snaps[:len(m.snaps)-1]
}

func (m *model) depth() int { return len(m.snaps) + 1 }

func randomBase(r *rand.Rand, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newTestDevice(t testing.TB, base []byte) *Device {
	t.Helper()
	d, err := New(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// randomRange returns an offset and length inside size, often unaligned and
// crossing sector boundaries.
func randomRange(r *rand.Rand, size int) (int, int) {
	off := r.IntN(size)
	var n int
	switch r.IntN(4) {
	case 0:
		n = 1 + r.IntN(16)
	case 1:
		n = 1 + r.IntN(3*SectorSize)
	case 2:
		off = off / SectorSize * SectorSize
		n = SectorSize * (1 + r.IntN(8))
	default:
		n = 1 + r.IntN(size)
	}
	return off, min(n, size-off)
}

func checkAgainstModel(t *testing.T, r *rand.Rand, d *Device, m *model, step int) {
	t.Helper()
	if got, want := d.Depth(), m.depth(); got != want {
		t.Fatalf("step %d: Depth() = %d, want %d", step, got, want)
	}
	for range 3 {
		off, n := randomRange(r, len(m.cur))
		got := make([]byte, n)
		if _, err := d.ReadAt(got, int64(off)); err != nil {
			t.Fatalf("step %d: ReadAt(%d, %d): %v", step, off, n, err)
		}
		if want := m.cur[off : off+n]; !bytes.Equal(got, want) {
			t.Fatalf("step %d: ReadAt(%d, %d) differs from model", step, off, n)
		}
	}
	got, err := d.Hash()
	if err != nil {
		t.Fatalf("step %d: Hash: %v", step, err)
	}
	if want := blake3.Sum256(m.cur); got != want {
		t.Fatalf("step %d: Hash = %x, want %x", step, got, want)
	}
}

func TestModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size  int
		steps int
		seeds uint64
	}{
		{size: SectorSize, steps: 200, seeds: 4},
		{size: 8 * SectorSize, steps: 400, seeds: 4},
		{size: 64 * SectorSize, steps: 400, seeds: 4},
		{size: 3<<20 + 7*SectorSize, steps: 40, seeds: 1}, // spans several 1 MiB hash chunks
	} {
		for seed := range tc.seeds {
			t.Run(fmt.Sprintf("size=%d/seed=%d", tc.size, seed), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(seed, uint64(tc.size)))
				base := randomBase(r, tc.size)
				d := newTestDevice(t, base)
				m := &model{cur: bytes.Clone(base)}
				for step := range tc.steps {
					switch op := r.IntN(10); {
					case op < 5:
						off, n := randomRange(r, tc.size)
						p := randomBase(r, n)
						if got, err := d.WriteAt(p, int64(off)); err != nil || got != n {
							t.Fatalf("step %d: WriteAt(%d, %d) = %d, %v", step, off, n, got, err)
						}
						copy(m.cur[off:], p)
					case op < 7:
						if got, want := d.Push(), m.depth()+1; got != want {
							t.Fatalf("step %d: Push() = %d, want %d", step, got, want)
						}
						m.push()
					case op < 9:
						err := d.Pop()
						if m.depth() == 1 {
							if !errors.Is(err, ErrBaseLayer) {
								t.Fatalf("step %d: Pop at depth 1 = %v, want ErrBaseLayer", step, err)
							}
							break
						}
						if err != nil {
							t.Fatalf("step %d: Pop: %v", step, err)
						}
						m.pop()
					default:
						target := 1 + r.IntN(m.depth())
						if err := d.PopTo(target); err != nil {
							t.Fatalf("step %d: PopTo(%d): %v", step, target, err)
						}
						for m.depth() > target {
							m.pop()
						}
					}
					checkAgainstModel(t, r, d, m, step)
				}
			})
		}
	}
}

func TestReadAtEOF(t *testing.T) {
	t.Parallel()
	base := bytes.Repeat([]byte{7}, 4*SectorSize)
	d := newTestDevice(t, base)
	for _, tc := range []struct {
		name    string
		off     int64
		len     int
		wantN   int
		wantErr error
	}{
		{"inside", 100, 200, 200, nil},
		{"to end", 3 * SectorSize, SectorSize, SectorSize, nil},
		{"across end", 4*SectorSize - 10, 20, 10, io.EOF},
		{"at end", 4 * SectorSize, 1, 0, io.EOF},
		{"past end", 5 * SectorSize, 1, 0, io.EOF},
		{"empty at end", 4 * SectorSize, 0, 0, nil},
		{"negative", -1, 1, 0, ErrOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := make([]byte, tc.len)
			n, err := d.ReadAt(p, tc.off)
			if n != tc.wantN || !errors.Is(err, tc.wantErr) {
				t.Errorf("ReadAt(len %d, %d) = %d, %v; want %d, %v", tc.len, tc.off, n, err, tc.wantN, tc.wantErr)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	t.Run("pop base", func(t *testing.T) {
		t.Parallel()
		d := newTestDevice(t, make([]byte, SectorSize))
		if err := d.Pop(); !errors.Is(err, ErrBaseLayer) {
			t.Errorf("Pop() = %v, want ErrBaseLayer", err)
		}
		d.Push()
		if err := d.Pop(); err != nil {
			t.Errorf("Pop() after Push = %v", err)
		}
		if err := d.Pop(); !errors.Is(err, ErrBaseLayer) {
			t.Errorf("second Pop() = %v, want ErrBaseLayer", err)
		}
	})
	t.Run("pop to", func(t *testing.T) {
		t.Parallel()
		d := newTestDevice(t, make([]byte, SectorSize))
		d.Push()
		for _, depth := range []int{0, -1, 3} {
			if err := d.PopTo(depth); !errors.Is(err, ErrDepth) {
				t.Errorf("PopTo(%d) = %v, want ErrDepth", depth, err)
			}
		}
		if err := d.PopTo(2); err != nil || d.Depth() != 2 {
			t.Errorf("PopTo(2) = %v, depth %d", err, d.Depth())
		}
		if err := d.PopTo(1); err != nil || d.Depth() != 1 {
			t.Errorf("PopTo(1) = %v, depth %d", err, d.Depth())
		}
	})
	t.Run("write out of range", func(t *testing.T) {
		t.Parallel()
		d := newTestDevice(t, make([]byte, 2*SectorSize))
		for _, tc := range []struct {
			off int64
			n   int
		}{{-1, 1}, {2 * SectorSize, 1}, {2*SectorSize - 1, 2}, {0, 2*SectorSize + 1}, {1 << 62, 1}} {
			if n, err := d.WriteAt(make([]byte, tc.n), tc.off); n != 0 || !errors.Is(err, ErrOutOfRange) {
				t.Errorf("WriteAt(len %d, %d) = %d, %v; want 0, ErrOutOfRange", tc.n, tc.off, n, err)
			}
		}
		if ws := d.WriteSet(); len(ws) != 0 {
			t.Errorf("WriteSet after failed writes = %v, want empty", ws)
		}
	})
	t.Run("base size", func(t *testing.T) {
		t.Parallel()
		for _, size := range []int64{-512, 1, 511, 513, 1000} {
			if _, err := New(bytes.NewReader(nil), size); !errors.Is(err, ErrBaseSize) {
				t.Errorf("New(size %d) = %v, want ErrBaseSize", size, err)
			}
		}
		path := filepath.Join(t.TempDir(), "odd.img")
		if err := os.WriteFile(path, make([]byte, 700), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path); !errors.Is(err, ErrBaseSize) {
			t.Errorf("Open(700-byte file) = %v, want ErrBaseSize", err)
		}
		if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Open(missing) = %v, want ErrNotExist", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		d, err := New(bytes.NewReader(make([]byte, SectorSize)), SectorSize)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := d.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		if _, err := d.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
			t.Errorf("ReadAt after Close = %v", err)
		}
		if _, err := d.WriteAt(make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
			t.Errorf("WriteAt after Close = %v", err)
		}
		if _, err := d.Hash(); !errors.Is(err, ErrClosed) {
			t.Errorf("Hash after Close = %v", err)
		}
	})
	t.Run("short base", func(t *testing.T) {
		t.Parallel()
		d := newTestDevice(t, make([]byte, SectorSize))
		d.base = bytes.NewReader(nil) // lies about its size
		if _, err := d.ReadAt(make([]byte, 1), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadAt over short base = %v, want ErrUnexpectedEOF", err)
		}
	})
}

func TestCounters(t *testing.T) {
	t.Parallel()
	d := newTestDevice(t, make([]byte, 16*SectorSize))
	write := func(off int64, n int) {
		t.Helper()
		if _, err := d.WriteAt(bytes.Repeat([]byte{0xab}, n), off); err != nil {
			t.Fatalf("WriteAt(%d, %d): %v", off, n, err)
		}
	}
	read := func(off int64, n int) {
		t.Helper()
		if _, err := d.ReadAt(make([]byte, n), off); err != nil {
			t.Fatalf("ReadAt(%d, %d): %v", off, n, err)
		}
	}
	check := func(name string, want []LayerStats) {
		t.Helper()
		if got := d.Stats(); !slices.Equal(got, want) {
			t.Errorf("%s: Stats() =\n%+v\nwant\n%+v", name, got, want)
		}
	}

	write(2*SectorSize, 2*SectorSize) // layer 1: sectors 2, 3
	write(10*SectorSize+100, 10)      // layer 1: sector 10 (partial: read-modify-write, not counted as a read)
	check("after writes", []LayerStats{{Sectors: 16}, {SectorsWritten: 3, Sectors: 3}})
	if got, want := d.WriteSet(), []uint64{2, 3, 10}; !slices.Equal(got, want) {
		t.Errorf("WriteSet() = %v, want %v", got, want)
	}

	d.Push()
	if ws := d.WriteSet(); len(ws) != 0 {
		t.Errorf("WriteSet() after Push = %v, want empty", ws)
	}
	write(3*SectorSize+511, 2) // layer 2: sectors 3, 4
	if got, want := d.WriteSet(), []uint64{3, 4}; !slices.Equal(got, want) {
		t.Errorf("WriteSet() = %v, want %v", got, want)
	}
	write(4*SectorSize, 1) // layer 2: sector 4 again
	read(0, 16*SectorSize) // base: 0,1,5-9,11-15 (12); layer 1: 2,10; layer 2: 3,4
	check("after full read", []LayerStats{
		{SectorsRead: 12, Sectors: 16},
		{SectorsRead: 2, SectorsWritten: 3, Sectors: 3},
		{SectorsRead: 2, SectorsWritten: 3, Sectors: 2},
	})
	read(3*SectorSize+10, 1) // one byte: one sector from layer 2
	check("after one byte", []LayerStats{
		{SectorsRead: 12, Sectors: 16},
		{SectorsRead: 2, SectorsWritten: 3, Sectors: 3},
		{SectorsRead: 3, SectorsWritten: 3, Sectors: 2},
	})
	if _, err := d.Hash(); err != nil {
		t.Fatal(err)
	}
	d.ResetCounters()
	check("after reset (and Hash is not counted)", []LayerStats{{Sectors: 16}, {Sectors: 3}, {Sectors: 2}})

	if err := d.Pop(); err != nil {
		t.Fatal(err)
	}
	read(3*SectorSize, SectorSize)
	check("after pop", []LayerStats{{Sectors: 16}, {SectorsRead: 1, Sectors: 3}})
}

func TestOpenMaterialize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	base := randomBase(r, 2<<20+3*SectorSize)
	basePath := filepath.Join(dir, "base.img")
	if err := os.WriteFile(basePath, base, 0o400); err != nil {
		t.Fatal(err)
	}
	d, err := Open(basePath)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if got, want := d.Size(), int64(len(base)); got != want {
		t.Errorf("Size() = %d, want %d", got, want)
	}
	want := bytes.Clone(base)
	patch := randomBase(r, 3000)
	if _, err := d.WriteAt(patch, 1<<20-1000); err != nil {
		t.Fatal(err)
	}
	copy(want[1<<20-1000:], patch)

	var buf bytes.Buffer
	if n, err := d.WriteTo(&buf); err != nil || n != int64(len(want)) {
		t.Fatalf("WriteTo = %d, %v", n, err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Error("WriteTo image differs from model")
	}

	out := filepath.Join(dir, "out.img")
	if err := d.Materialize(out); err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("materialized image differs from model")
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("materialized mode = %v, want 0600", mode)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want base and out only", len(entries))
	}
	if err := d.Materialize(filepath.Join(dir, "missing", "x.img")); err == nil {
		t.Error("Materialize into a missing directory succeeded")
	}
	onDisk, err := os.ReadFile(basePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, base) {
		t.Error("base file was modified")
	}
	for range 2 {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	d := newTestDevice(t, make([]byte, 64*SectorSize))
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			p := bytes.Repeat([]byte{byte(w)}, 700)
			for i := range 200 {
				off := int64((i*37 + w*1000) % (64*SectorSize - len(p)))
				if _, err := d.WriteAt(p, off); err != nil {
					t.Errorf("WriteAt: %v", err)
					return
				}
				if _, err := d.ReadAt(p[:100], off); err != nil {
					t.Errorf("ReadAt: %v", err)
					return
				}
				if i%50 == 0 {
					if _, err := d.Hash(); err != nil {
						t.Errorf("Hash: %v", err)
					}
					d.Stats()
					d.WriteSet()
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

func BenchmarkReadAt4K(b *testing.B) {
	d := newTestDevice(b, make([]byte, 64<<20))
	p := make([]byte, 4096)
	for i := range 1024 { // half the sectors in a layer
		if _, err := d.WriteAt(p[:SectorSize], int64(i)*2*SectorSize); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(p)))
	i := 0
	for b.Loop() {
		if _, err := d.ReadAt(p, int64(i%256)*4096); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkWriteAt4K(b *testing.B) {
	d := newTestDevice(b, make([]byte, 64<<20))
	p := make([]byte, 4096)
	b.SetBytes(int64(len(p)))
	i := 0
	for b.Loop() {
		if _, err := d.WriteAt(p, int64(i%4096)*4096); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPushWritePop writes 16 new sectors per iteration, with and
// without a session budget billed for them (a session's Account under the
// daemon's budget), side by side.
func BenchmarkPushWritePop(b *testing.B) {
	for _, billed := range []bool{false, true} {
		b.Run(fmt.Sprintf("budget=%v", billed), func(b *testing.B) {
			d := newTestDevice(b, make([]byte, 64<<20))
			if billed {
				daemon, err := budget.New("daemon", "", 1<<30, nil)
				if err != nil {
					b.Fatal(err)
				}
				sess, err := budget.New("session", "", 1<<30, daemon)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.SetCharger(sess.Account("overlay")); err != nil {
					b.Fatal(err)
				}
			}
			p := make([]byte, 16*SectorSize)
			for b.Loop() {
				d.Push()
				if _, err := d.WriteAt(p, 1<<20); err != nil {
					b.Fatal(err)
				}
				if err := d.Pop(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestReadSet checks the read set against a naive model: the sectors each
// counted read covers, accumulated in a map, across writes, Push and Pop
// (which, unlike the per-layer counters, the set outlives).
func TestReadSet(t *testing.T) {
	t.Parallel()
	const size = 64 * SectorSize
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 7))
		d := newTestDevice(t, randomBase(r, size))
		if got := d.ReadSet(); got != nil {
			t.Fatalf("ReadSet before TrackReads = %v, want nil", got)
		}
		if _, err := d.ReadAt(make([]byte, SectorSize), 0); err != nil {
			t.Fatal(err)
		}
		d.TrackReads(true)
		want := map[uint64]bool{}
		for step := range 200 {
			switch op := r.IntN(10); {
			case op < 5:
				off, n := randomRange(r, size)
				if _, err := d.ReadAt(make([]byte, n), int64(off)); err != nil {
					t.Fatalf("step %d: ReadAt: %v", step, err)
				}
				for l := off / SectorSize; l <= (off+n-1)/SectorSize; l++ {
					want[uint64(l)] = true
				}
			case op < 7:
				// Writes, partial ones included (their read half is not counted).
				off, n := randomRange(r, size)
				if _, err := d.WriteAt(randomBase(r, n), int64(off)); err != nil {
					t.Fatalf("step %d: WriteAt: %v", step, err)
				}
			case op < 8:
				d.Push()
			case op < 9:
				if err := d.Pop(); err != nil && !errors.Is(err, ErrBaseLayer) {
					t.Fatalf("step %d: Pop: %v", step, err)
				}
			default:
				if _, err := d.Hash(); err != nil { // internal: not counted
					t.Fatal(err)
				}
				if r.IntN(4) == 0 {
					d.ResetCounters()
					clear(want)
				}
			}
			wantList := make([]uint64, 0, len(want))
			for l := range want {
				wantList = append(wantList, l)
			}
			slices.Sort(wantList)
			if got := d.ReadSet(); !slices.Equal(got, wantList) {
				t.Fatalf("seed %d step %d: ReadSet() = %v, want %v", seed, step, got, wantList)
			}
		}
		d.TrackReads(true) // on again: kept
		if len(want) > 0 && len(d.ReadSet()) != len(want) {
			t.Errorf("TrackReads(true) twice dropped the set")
		}
		d.TrackReads(false)
		if got := d.ReadSet(); got != nil {
			t.Errorf("ReadSet after TrackReads(false) = %v, want nil", got)
		}
	}
}

// meter is a Charger with a limit, for TestCharger.
type meter struct {
	held, limit int64
}

func (m *meter) Charge(n int64) error {
	if m.held+n > m.limit {
		return errors.New("meter: over the limit")
	}
	m.held += n
	return nil
}

func (m *meter) Release(n int64) { m.held -= n }

func TestCharger(t *testing.T) {
	const sectors = 64
	for _, tc := range []struct {
		name string
		do   func(d *Device) error
		want int64 // sectors billed afterwards
	}{
		{"one partial write", func(d *Device) error { _, err := d.WriteAt([]byte{1}, 700); return err }, 1},
		{"a write across three sectors", func(d *Device) error { _, err := d.WriteAt(make([]byte, 1026), 10); return err }, 3},
		{"a rewrite bills nothing", func(d *Device) error {
			for range 3 {
				if _, err := d.WriteAt(make([]byte, 512), 0); err != nil {
					return err
				}
			}
			return nil
		}, 1},
		{"a pushed layer bills its own copy", func(d *Device) error {
			if _, err := d.WriteAt(make([]byte, 512), 0); err != nil {
				return err
			}
			d.Push()
			_, err := d.WriteAt(make([]byte, 512), 0)
			return err
		}, 2},
		{"pop gives back", func(d *Device) error {
			d.Push()
			if _, err := d.WriteAt(make([]byte, 2048), 0); err != nil {
				return err
			}
			return d.Pop()
		}, 0},
		{"popto gives back", func(d *Device) error {
			if _, err := d.WriteAt(make([]byte, 512), 0); err != nil {
				return err
			}
			d.Push()
			d.Push()
			if _, err := d.WriteAt(make([]byte, 1024), 0); err != nil {
				return err
			}
			return d.PopTo(1)
		}, 1},
		{"merge gives back the duplicates", func(d *Device) error {
			if _, err := d.WriteAt(make([]byte, 1024), 0); err != nil {
				return err
			}
			d.Push()
			if _, err := d.WriteAt(make([]byte, 1024), 512); err != nil {
				return err
			}
			return d.Merge(2)
		}, 3},
		{"close gives back", func(d *Device) error {
			if _, err := d.WriteAt(make([]byte, 4096), 0); err != nil {
				return err
			}
			return d.Close()
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(bytes.NewReader(make([]byte, sectors*SectorSize)), sectors*SectorSize)
			if err != nil {
				t.Fatal(err)
			}
			m := &meter{limit: 1 << 30}
			if err := d.SetCharger(m); err != nil {
				t.Fatal(err)
			}
			if err := tc.do(d); err != nil {
				t.Fatal(err)
			}
			if m.held != tc.want*SectorCost {
				t.Errorf("billed %d bytes, want %d sectors (%d bytes)", m.held, tc.want, tc.want*SectorCost)
			}
		})
	}
}

func TestChargerRefuses(t *testing.T) {
	d, err := New(bytes.NewReader(make([]byte, 16*SectorSize)), 16*SectorSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt([]byte{7}, 0); err != nil {
		t.Fatal(err)
	}
	m := &meter{limit: 3 * SectorCost}
	if err := d.SetCharger(m); err != nil {
		t.Fatal(err)
	}
	if m.held != SectorCost {
		t.Fatalf("SetCharger billed %d, want the one held sector", m.held)
	}
	if err := d.SetCharger(m); err == nil {
		t.Error("a second charger accepted")
	}
	// Three new sectors do not fit in the two left: nothing is written.
	if n, err := d.WriteAt(bytes.Repeat([]byte{9}, 3*SectorSize), SectorSize); err == nil || n != 0 {
		t.Fatalf("write past the limit: n %d err %v", n, err)
	}
	got := make([]byte, 4*SectorSize)
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if got[0] != 7 || !bytes.Equal(got[SectorSize:], make([]byte, 3*SectorSize)) {
		t.Error("a refused write changed the image")
	}
	if st := d.Stats(); st[1].Sectors != 1 || m.held != SectorCost {
		t.Errorf("after a refused write: %d sectors held, %d bytes billed", st[1].Sectors, m.held)
	}
	// Sector 0 is held: a write into it needs nothing.
	if _, err := d.WriteAt(bytes.Repeat([]byte{1}, SectorSize), 0); err != nil {
		t.Errorf("a rewrite of a held sector refused: %v", err)
	}
}

// failingBase is a base image whose every read fails.
type failingBase struct{}

func (failingBase) ReadAt([]byte, int64) (int, error) { return 0, errors.New("base gone") }

// TestFailedWriteReleasesCharge: a write that fails after it was billed
// (a partial sector it cannot fill from a failing base, while logging or
// not) gives back what it billed for sectors it did not make, and one
// refused up front bills nothing: the budget then holds exactly what the
// device holds.
func TestFailedWriteReleasesCharge(t *testing.T) {
	t.Parallel()
	const size = 8 * SectorSize
	whole := func(d *Device) error { _, err := d.WriteAt(make([]byte, SectorSize), 0); return err }
	tests := []struct {
		name    string
		setup   func(d *Device) error
		off     int64
		n       int
		made    int64 // sectors the failed write still made (written before it failed)
		wantErr error
	}{
		{"partial sector", nil, 10, 20, 0, nil},
		{"whole sector then a partial one", nil, 0, SectorSize + 10, 1, nil},
		{"held sector then a partial one", whole, 0, SectorSize + 10, 0, nil},
		{"partial sector while logging", (*Device).StartLog, 10, 20, 0, nil},
		{"whole then partial while logging", (*Device).StartLog, 0, SectorSize + 10, 1, nil},
		{"out of range", nil, size - 10, 20, 0, ErrOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := New(failingBase{}, size)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := d.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			b, err := budget.New("session", "", 1<<30, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.SetCharger(b.Account("overlay")); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				if err := tt.setup(d); err != nil {
					t.Fatal(err)
				}
			}
			before := b.Used()
			_, err = d.WriteAt(make([]byte, tt.n), tt.off)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("write: err %v, want a failure (%v)", err, tt.wantErr)
			}
			if got, want := b.Used()-before, tt.made*SectorCost; got != want {
				t.Errorf("budget used grew by %d bytes, want %d (%d sectors made)", got, want, tt.made)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if got := b.Used(); got != 0 {
				t.Errorf("after Close: %d bytes still billed", got)
			}
		})
	}
}
