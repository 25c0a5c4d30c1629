package kvm

import (
	"encoding/binary"
	"testing"
)

func ramSection(ranges ...[2]uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(ranges)))
	for _, r := range ranges {
		b = binary.LittleEndian.AppendUint64(b, r[0])
		b = binary.LittleEndian.AppendUint64(b, r[1])
		b = append(b, make([]byte, r[1])...)
	}
	return b
}

func TestParseRAMSection(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"empty list", ramSection(), true},
		{"two ranges", ramSection([2]uint64{0, 4096}, [2]uint64{8192, 4096}), true},
		{"to the end", ramSection([2]uint64{65536 - 4096, 4096}), true},
		{"past the end", ramSection([2]uint64{65536 - 4096, 8192}), false},
		{"offset overflow", ramSection([2]uint64{^uint64(0) - 10, 16}), false},
		{"too short", []byte{1, 0}, false},
		{"count lies", ramSection([2]uint64{0, 16})[:4+16+8], false},
		{"trailing bytes", append(ramSection([2]uint64{0, 16}), 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseRAMSection(tt.b, 65536, func(uint64, []byte) {})
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func FuzzParseRAMSection(f *testing.F) {
	f.Add(ramSection([2]uint64{0, 4096}))
	f.Add(ramSection([2]uint64{4096, 16}, [2]uint64{0, 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		const size = 1 << 16
		mem := make([]byte, size)
		_ = parseRAMSection(b, size, func(off uint64, d []byte) {
			if off+uint64(len(d)) > size {
				t.Fatalf("range [%d, +%d) outside RAM", off, len(d))
			}
			copy(mem[off:], d)
		})
	})
}
