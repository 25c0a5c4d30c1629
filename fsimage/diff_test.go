package fsimage

import (
	"bytes"
	"errors"
	"testing"
)

func TestDiffRaw(t *testing.T) {
	t.Parallel()
	const size = 3 << 20 // crosses the 1 MiB chunks
	tests := []struct {
		name    string
		flips   []int64
		sectors int
		ranges  int
	}{
		{"equal", nil, 0, 0},
		{"one byte", []int64{5}, 1, 1},
		{"run in one sector", []int64{600, 601, 602}, 1, 1},
		{"two runs one sector", []int64{600, 700}, 1, 2},
		{"across a sector boundary", []int64{511, 512}, 2, 1},
		{"across a chunk boundary", []int64{1<<20 - 1, 1 << 20}, 2, 1},
		{"last byte", []int64{size - 1}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := bytes.Repeat([]byte{0xaa}, size)
			b := bytes.Clone(a)
			for _, o := range tt.flips {
				b[o] ^= 0xff
			}
			d, err := Diff(bytes.NewReader(a), bytes.NewReader(b), size, false)
			if err != nil {
				t.Fatal(err)
			}
			if d.RawSectors != tt.sectors || d.NormalizedSectors != tt.sectors || len(d.Ranges) != tt.ranges {
				t.Errorf("raw %d normalized %d ranges %d, want %d %d %d", d.RawSectors, d.NormalizedSectors, len(d.Ranges), tt.sectors, tt.sectors, tt.ranges)
			}
			total := 0
			for _, r := range d.Ranges {
				total += r.Len
			}
			if total != len(tt.flips) {
				t.Errorf("ranges cover %d bytes, want %d", total, len(tt.flips))
			}
		})
	}
	if _, err := Diff(bytes.NewReader(nil), bytes.NewReader(nil), 100, false); !errors.Is(err, ErrCorrupt) {
		t.Errorf("size not a multiple of 512: %v", err)
	}
	junk := bytes.Repeat([]byte{1}, 4096)
	if _, err := Diff(bytes.NewReader(junk), bytes.NewReader(junk), 4096, true); err == nil {
		t.Error("normalized diff of non-ext images: no error")
	}
}
