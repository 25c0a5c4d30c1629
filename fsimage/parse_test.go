package fsimage

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestDecodeTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		raw, ext uint32
		has      bool
		wantSec  int64
		wantNsec uint32
	}{
		{"no extra", 1000000000, 0, false, 1000000000, 0},
		{"pre-1970", 0xFFFFFFFF, 0, false, -1, 0},
		{"clamped 2038", 0x7FFFFFFF, 0, false, 0x7FFFFFFF, 0},
		{"nanoseconds", 1000000000, 5 << 2, true, 1000000000, 5},
		{"epoch bit 1", 0, 1, true, 1 << 32, 0},
		{"epoch bits 3, negative raw", 0x80000000, 3, true, -(1 << 31) + 3<<32, 0},
	} {
		got := decodeTime(tc.raw, tc.ext, tc.has)
		if got.Sec != tc.wantSec || got.Nsec != tc.wantNsec || got.Raw32 != tc.raw || got.HasExtra != tc.has {
			t.Errorf("%s: got %+v, want sec %d nsec %d", tc.name, got, tc.wantSec, tc.wantNsec)
		}
	}
}

func TestParseDirBlock(t *testing.T) {
	t.Parallel()
	type ent struct {
		ino  uint32
		rl   uint16
		nl   int
		name string
	}
	build := func(size int, es ...ent) []byte {
		b := make([]byte, size)
		off := 0
		for _, e := range es {
			binary.LittleEndian.PutUint32(b[off:], e.ino)
			binary.LittleEndian.PutUint16(b[off+4:], e.rl)
			b[off+6] = byte(e.nl)
			b[off+7] = FTRegular
			copy(b[off+8:], e.name)
			off += int(e.rl)
			if off >= size {
				break
			}
		}
		return b
	}
	for _, tc := range []struct {
		name      string
		b         []byte
		wantNames []string
		wantErr   bool
	}{
		{"one entry fills block", build(64, ent{5, 64, 1, "a"}), []string{"a"}, false},
		{"two entries", build(64, ent{5, 12, 1, "a"}, ent{6, 52, 2, "bb"}), []string{"a", "bb"}, false},
		{"deleted entry skipped", build(64, ent{0, 12, 1, "a"}, ent{6, 52, 2, "bb"}), []string{"bb"}, false},
		{"rec_len zero", build(64, ent{5, 0, 1, "a"}), nil, true},
		{"rec_len unaligned", build(64, ent{5, 10, 1, "a"}, ent{6, 54, 1, "b"}), nil, true},
		{"rec_len past block", build(64, ent{5, 68, 1, "a"}), nil, true},
		{"name longer than rec_len", build(64, ent{5, 12, 9, "abcdefghi"}, ent{6, 52, 1, "b"}), nil, true},
		{"empty name in use", build(64, ent{5, 64, 0, ""}), nil, true},
		{"short tail", build(6), nil, true},
		{"empty block", nil, nil, false},
	} {
		ents, err := parseDirBlock(tc.b, 9, true)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.wantErr)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: %v does not wrap ErrCorrupt", tc.name, err)
			}
			continue
		}
		var got []string
		for _, d := range ents {
			got = append(got, d.Name)
			if d.Block != 9 {
				t.Errorf("%s: block %d", tc.name, d.Block)
			}
		}
		if len(got) != len(tc.wantNames) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.wantNames)
			continue
		}
		for i := range got {
			if got[i] != tc.wantNames[i] {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.wantNames)
			}
		}
	}
}

func TestParseExtentNode(t *testing.T) {
	t.Parallel()
	le := binary.LittleEndian
	node := func(depth, max uint16, entries ...[3]uint32) []byte {
		b := make([]byte, 12+12*int(max))
		le.PutUint16(b, extentMagic)
		le.PutUint16(b[2:], uint16(len(entries)))
		le.PutUint16(b[4:], max)
		le.PutUint16(b[6:], depth)
		for i, e := range entries {
			o := 12 + 12*i
			le.PutUint32(b[o:], e[0])
			if depth == 0 {
				le.PutUint16(b[o+4:], uint16(e[1]))
				le.PutUint32(b[o+8:], e[2])
			} else {
				le.PutUint32(b[o+4:], e[2])
			}
		}
		return b
	}
	bad := node(0, 4, [3]uint32{0, 1, 100})
	le.PutUint16(bad, 0x1234)
	for _, tc := range []struct {
		name    string
		b       []byte
		want    []Extent
		nidx    int
		wantErr bool
	}{
		{"leaf", node(0, 4, [3]uint32{0, 8, 100}, [3]uint32{8, 2, 500}),
			[]Extent{{0, 100, 8, false}, {8, 500, 2, false}}, 0, false},
		{"uninit", node(0, 4, [3]uint32{0, extentInitMax + 5, 100}), []Extent{{0, 100, 5, true}}, 0, false},
		{"index", node(1, 4, [3]uint32{0, 0, 77}, [3]uint32{100, 0, 78}), nil, 2, false},
		{"bad magic", bad, nil, 0, true},
		{"entries over max", func() []byte { b := node(0, 1, [3]uint32{0, 1, 1}); le.PutUint16(b[2:], 2); return b }(), nil, 0, true},
		{"max past buffer", func() []byte { b := node(0, 1); le.PutUint16(b[4:], 2); return b }(), nil, 0, true},
		{"depth too big", node(6, 1), nil, 0, true},
		{"zero length", node(0, 2, [3]uint32{0, 0, 100}), nil, 0, true},
		{"overlap", node(0, 2, [3]uint32{0, 8, 100}, [3]uint32{4, 1, 200}), nil, 0, true},
		{"index out of order", node(1, 2, [3]uint32{10, 0, 1}, [3]uint32{10, 0, 2}), nil, 0, true},
		{"past 2^32", node(0, 1, [3]uint32{0xFFFFFFFF, 2, 100}), nil, 0, true},
		{"short", []byte{0x0A, 0xF3}, nil, 0, true},
	} {
		_, ext, idx, err := parseExtentNode(tc.b)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.wantErr)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: %v does not wrap ErrCorrupt", tc.name, err)
			}
			continue
		}
		if len(idx) != tc.nidx || len(ext) != len(tc.want) {
			t.Errorf("%s: got %v / %v", tc.name, ext, idx)
			continue
		}
		for i := range ext {
			if ext[i] != tc.want[i] {
				t.Errorf("%s: extent %d = %+v, want %+v", tc.name, i, ext[i], tc.want[i])
			}
		}
	}
}

func TestParseSuperblockRejects(t *testing.T) {
	t.Parallel()
	good := func() []byte {
		b := make([]byte, SuperblockSize)
		le := binary.LittleEndian
		le.PutUint32(b[0:], 128)    // inodes
		le.PutUint32(b[4:], 4096)   // blocks
		le.PutUint32(b[20:], 1)     // first data block
		le.PutUint32(b[32:], 8192)  // blocks per group
		le.PutUint32(b[40:], 128)   // inodes per group
		le.PutUint16(b[56:], Magic) // magic
		le.PutUint32(b[76:], 1)     // rev
		le.PutUint32(b[84:], 11)    // first ino
		le.PutUint16(b[88:], 128)   // inode size
		return b
	}
	set := func(off int, v uint32, n int) []byte {
		b := good()
		switch n {
		case 2:
			binary.LittleEndian.PutUint16(b[off:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(b[off:], v)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"good", good(), nil},
		{"short", good()[:100], ErrCorrupt},
		{"magic", set(56, 0xEF52, 2), ErrCorrupt},
		{"block size over 64 KiB", set(24, 7, 4), ErrCorrupt},
		{"inode size 100", set(88, 100, 2), ErrCorrupt},
		{"inode size over block", set(88, 2048, 2), ErrCorrupt},
		{"blocks per group 0", set(32, 0, 4), ErrCorrupt},
		{"blocks per group over bitmap", set(32, 8200, 4), ErrCorrupt},
		{"inodes per group 0", set(40, 0, 4), ErrCorrupt},
		{"first data block 0 with 1 KiB", set(20, 0, 4), ErrCorrupt},
		{"revision 2", set(76, 2, 4), ErrUnsupported},
		{"unknown incompat", set(96, 0x80000000, 4), ErrUnsupported},
		{"compression", set(96, IncompatCompression, 4), ErrUnsupported},
		{"bigalloc", set(100, RoCompatBigalloc, 4), ErrUnsupported},
		{"rev 0 ignores inode size field", func() []byte { b := set(76, 0, 4); binary.LittleEndian.PutUint16(b[88:], 3); return b }(), nil},
	} {
		_, err := parseSuperblock(tc.b)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}
