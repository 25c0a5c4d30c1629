package overlay

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/themisfs/themis/internal/budget"
)

// loggedWrite is the model's record of one logged write: the whole sectors
// it left, as they were right after it.
type loggedWrite struct {
	lba  uint64
	data []byte
}

// crashModel is the image a crash view must show: start with the chosen
// writes' sectors laid over it in order.
func crashModel(start []byte, writes []loggedWrite, keep map[int]bool) []byte {
	img := bytes.Clone(start)
	for i, w := range writes {
		if keep[i] {
			copy(img[w.lba*SectorSize:], w.data)
		}
	}
	return img
}

func readAll(t *testing.T, r io.ReaderAt, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	if n, err := r.ReadAt(b, 0); n != size || (err != nil && err != io.EOF) {
		t.Fatalf("read %d of %d bytes: %v", n, size, err)
	}
	return b
}

// TestCrashViewModel: over random unaligned writes and flushes after a
// checkpoint, every crash view (random subsets, none, all) reads as the
// image at the log's start with the chosen writes' sectors, as each write
// left them, laid over it in log order; the log lists the writes as whole
// sectors and the flushes in order; and no write changed a sector an
// earlier one logged.
func TestCrashViewModel(t *testing.T) {
	t.Parallel()
	const size = 48 * SectorSize
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		d := newTestDevice(t, randomBase(r, size))
		for range 3 { // history below the log's layer
			off, n := randomRange(r, size)
			if _, err := d.WriteAt(randomBase(r, n), int64(off)); err != nil {
				t.Fatal(err)
			}
			d.Push()
		}
		start := readAll(t, d, size)
		if err := d.StartLog(); err != nil {
			t.Fatal(err)
		}
		var writes []loggedWrite
		var want []LogEntry
		writeIdx := map[int]int{} // log index -> writes index
		for range 2 + r.IntN(12) {
			if r.IntN(4) == 0 {
				if err := d.Flush(); err != nil {
					t.Fatal(err)
				}
				want = append(want, LogEntry{Flush: true})
				continue
			}
			off, n := randomRange(r, size)
			if _, err := d.WriteAt(randomBase(r, n), int64(off)); err != nil {
				t.Fatal(err)
			}
			first, last := off/SectorSize, (off+n-1)/SectorSize
			now := readAll(t, d, size)
			writeIdx[len(want)] = len(writes)
			writes = append(writes, loggedWrite{lba: uint64(first), data: bytes.Clone(now[first*SectorSize : (last+1)*SectorSize])})
			want = append(want, LogEntry{LBA: uint64(first), Sectors: last - first + 1})
		}
		info, err := d.Log()
		if err != nil || info.Overflowed || info.Depth != 4 {
			t.Fatalf("seed %d: log %+v, %v", seed, info, err)
		}
		if len(info.Entries) != len(want) {
			t.Fatalf("seed %d: log %+v, want %+v", seed, info.Entries, want)
		}
		for i := range want {
			if info.Entries[i] != want[i] {
				t.Fatalf("seed %d: entry %d = %+v, want %+v", seed, i, info.Entries[i], want[i])
			}
		}
		for trial := range 12 {
			var keep []int
			chosen := map[int]bool{}
			for li, wi := range writeIdx {
				if trial == 1 || (trial > 1 && r.IntN(2) == 0) { // trial 0: none, 1: all
					keep = append(keep, li)
					chosen[wi] = true
				}
			}
			v, err := d.CrashView(keep)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, v, size); !bytes.Equal(got, crashModel(start, writes, chosen)) {
				t.Fatalf("seed %d trial %d: crash view of %v differs from the model", seed, trial, keep)
			}
			if trial == 1 && !bytes.Equal(readAll(t, v, size), readAll(t, d, size)) {
				t.Fatalf("seed %d: the view of every write is not the device's image", seed)
			}
			var streamed bytes.Buffer
			if n, err := v.WriteTo(&streamed); err != nil || n != size || !bytes.Equal(streamed.Bytes(), crashModel(start, writes, chosen)) {
				t.Fatalf("seed %d trial %d: WriteTo wrote %d bytes (%v), not the view", seed, trial, n, err)
			}
		}
	}
}

// TestWriteLogBadUse: the log starts only on an empty top layer; a flush
// or an unknown index is no write to keep; any change of the layers ends
// the log, and a view of it then reads ErrNoLog.
func TestWriteLogBadUse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		end  func(d *Device) error
	}{
		{"pop", func(d *Device) error { return d.Pop() }},
		{"pop to", func(d *Device) error { return d.PopTo(1) }},
		{"merge", func(d *Device) error { return d.Merge(2) }},
		{"stop", func(d *Device) error { d.StopLog(); return nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDevice(t, make([]byte, 8*SectorSize))
			if _, err := d.WriteAt([]byte{1}, 0); err != nil {
				t.Fatal(err)
			}
			if err := d.StartLog(); !errors.Is(err, ErrLogNotEmpty) {
				t.Fatalf("StartLog on a written layer: %v, want ErrLogNotEmpty", err)
			}
			d.Push()
			if err := d.StartLog(); err != nil {
				t.Fatal(err)
			}
			if _, err := d.WriteAt([]byte{2}, 0); err != nil {
				t.Fatal(err)
			}
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			for _, bad := range [][]int{{1}, {2}, {-1}} {
				if _, err := d.CrashView(bad); err == nil {
					t.Errorf("CrashView(%v): no error", bad)
				}
			}
			v, err := d.CrashView([]int{0})
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.end(d); err != nil {
				t.Fatal(err)
			}
			if _, err := v.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrNoLog) {
				t.Errorf("view read after %s: %v, want ErrNoLog", tt.name, err)
			}
			if _, err := d.Log(); !errors.Is(err, ErrNoLog) {
				t.Errorf("Log after %s: %v, want ErrNoLog", tt.name, err)
			}
		})
	}
}

// TestWriteLogOverflow: past MaxLogEntries the log is dropped, says so,
// and refuses crash views; writes go on.
func TestWriteLogOverflow(t *testing.T) {
	t.Parallel()
	d := newTestDevice(t, make([]byte, 8*SectorSize))
	if err := d.StartLog(); err != nil {
		t.Fatal(err)
	}
	for range MaxLogEntries + 1 {
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	info, err := d.Log()
	if err != nil || !info.Overflowed || len(info.Entries) != 0 {
		t.Fatalf("log after %d flushes: %d entries, overflowed %v, %v", MaxLogEntries+1, len(info.Entries), info.Overflowed, err)
	}
	if _, err := d.CrashView(nil); !errors.Is(err, ErrLogOverflow) {
		t.Errorf("CrashView of an overflowed log: %v", err)
	}
	if _, err := d.WriteAt([]byte{7}, 0); err != nil {
		t.Errorf("write after the overflow: %v", err)
	}
}

// TestWriteLogCharged: the sector versions only the log holds are billed
// while it runs, and everything is given back after StopLog and Pop.
func TestWriteLogCharged(t *testing.T) {
	t.Parallel()
	b, err := budget.New("session", "", 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := newTestDevice(t, make([]byte, 8*SectorSize))
	if err := d.SetCharger(b.Account("overlay")); err != nil {
		t.Fatal(err)
	}
	d.Push()
	if err := d.StartLog(); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the same sector three times: three versions held
		if _, err := d.WriteAt(make([]byte, SectorSize), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Used(); got != 3*SectorCost {
		t.Errorf("billed %d bytes for 3 logged versions of a sector, want %d", got, 3*SectorCost)
	}
	d.StopLog()
	if got := b.Used(); got != SectorCost {
		t.Errorf("after StopLog: billed %d, want %d (the layer's one sector)", got, SectorCost)
	}
	if err := d.Pop(); err != nil {
		t.Fatal(err)
	}
	if got := b.Used(); got != 0 {
		t.Errorf("after Pop: billed %d, want 0", got)
	}
}

// BenchmarkWriteLogged: 16-sector writes into a layer (the same sectors
// again and again, as a journal's) without and with a write log, side by
// side: the log's cost is a fresh sector per write and its record.
func BenchmarkWriteLogged(b *testing.B) {
	for _, logged := range []bool{false, true} {
		b.Run(map[bool]string{false: "log=off", true: "log=on"}[logged], func(b *testing.B) {
			d := newTestDevice(b, make([]byte, 64<<20))
			p := make([]byte, 16*SectorSize)
			for b.Loop() {
				d.Push()
				if logged {
					if err := d.StartLog(); err != nil {
						b.Fatal(err)
					}
				}
				for i := range 64 {
					if _, err := d.WriteAt(p, int64(i%8)*int64(len(p))); err != nil {
						b.Fatal(err)
					}
				}
				if err := d.Pop(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCrashViewAfterOverflow: a crash view taken before its log overflowed
// fails every read afterwards instead of serving what was written past the
// overflow (unlogged writes then go into the sectors the view holds).
func TestCrashViewAfterOverflow(t *testing.T) {
	t.Parallel()
	d := newTestDevice(t, make([]byte, 8*SectorSize))
	if err := d.StartLog(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt(bytes.Repeat([]byte{'A'}, SectorSize), 0); err != nil {
		t.Fatal(err)
	}
	v, err := d.CrashView([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	for range MaxLogEntries {
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := d.Log(); err != nil || !info.Overflowed {
		t.Fatalf("log after %d entries: overflowed %v, %v", MaxLogEntries+1, info.Overflowed, err)
	}
	if _, err := d.WriteAt(bytes.Repeat([]byte{'B'}, SectorSize), 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		off  int64
		n    int
	}{
		{"the kept write's sector", 0, SectorSize},
		{"a sector below the log", SectorSize, SectorSize},
		{"a partial read", 10, 20},
	}
	for _, tt := range tests {
		got := make([]byte, tt.n)
		n, err := v.ReadAt(got, tt.off)
		if !errors.Is(err, ErrLogOverflow) {
			t.Errorf("%s: read %d bytes (%q...) through a view of an overflowed log: err %v, want ErrLogOverflow", tt.name, n, got[:min(n, 4)], err)
		}
	}
	if _, err := v.WriteTo(io.Discard); !errors.Is(err, ErrLogOverflow) {
		t.Errorf("WriteTo of a view of an overflowed log: %v, want ErrLogOverflow", err)
	}
}
