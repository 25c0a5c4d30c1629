package fsimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// seedImages returns small real images for fuzz seeds: two whole 64 KiB
// images (ext2 and ext4 with metadata_csum, populated) and the first
// 64 KiB of each test image. It returns none when e2fsprogs is missing.
func seedImages(f *testing.F) [][]byte {
	for _, tool := range []string{"mkfs.ext2", "mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil
		}
	}
	dir := f.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, content(9, 3000), 0o644); err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, tc := range []struct {
		tool string
		args []string
	}{
		{"mkfs.ext2", []string{"-I", "128", "-b", "1024", "-N", "16"}},
		{"mkfs.ext4", []string{"-I", "256", "-b", "1024", "-N", "16", "-O", "^has_journal,64bit,metadata_csum"}},
	} {
		p := filepath.Join(dir, tc.tool)
		if err := mkfs(p, tc.tool, 64, []string{"E2FSPROGS_FAKE_TIME=1000000000"}, tc.args...); err != nil {
			f.Fatal(err)
		}
		if err := debugfsW(p, "mkdir d\nwrite "+small+" d/f\nsymlink s d/f\n"); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// mutations returns b, truncations of it and bit-flipped variants at
// interesting offsets.
func mutations(b []byte) [][]byte {
	out := [][]byte{b}
	for _, n := range []int{0, 1023, 2048, 4096, len(b) / 2} {
		if n < len(b) {
			out = append(out, b[:n])
		}
	}
	for _, off := range []int{1024 + 24, 1024 + 32, 1024 + 40, 1024 + 56, 1024 + 88, 2048, 2048 + 8, 4096} {
		if off < len(b) {
			c := append([]byte(nil), b...)
			c[off] ^= 0x80
			out = append(out, c)
		}
	}
	return out
}

func exerciseFS(b []byte) {
	fs, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
			panic("Open error wraps neither ErrCorrupt nor ErrUnsupported: " + err.Error())
		}
		return
	}
	_ = fs.Superblock()
	_, _ = fs.Inode(RootIno)
	_, _ = fs.ReadDir(RootIno)
	_, _ = fs.Blocks(RootIno)
	_, _ = fs.ReadFile(RootIno, 1<<20)
	_, _ = fs.Lookup("/d/f")
	_, _ = fs.ReadFile(12, 1<<20)
	_, _ = fs.ReadDir(11)
	l := fs.Layout()
	var next uint64
	for _, r := range l {
		if r.FirstLBA != next || r.Sectors == 0 {
			panic("layout is not a partition")
		}
		next = r.End()
	}
	_ = fs.Locate(3)
	_ = fs.Locate(1 << 40)
	if m, err := NuisanceRanges(fs); err == nil {
		for _, r := range m {
			if r.Offset < 0 || r.Len <= 0 || r.Offset+int64(r.Len) > int64(len(b)) {
				panic("nuisance range outside the image")
			}
		}
	}
}

func FuzzOpen(f *testing.F) {
	for _, img := range seedImages(f) {
		for _, m := range mutations(img) {
			f.Add(m)
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		exerciseFS(b)
	})
}

func FuzzDirent(f *testing.F) {
	blk := make([]byte, 1024)
	put := func(off int, ino uint32, rl uint16, name string, ft byte) {
		binary.LittleEndian.PutUint32(blk[off:], ino)
		binary.LittleEndian.PutUint16(blk[off+4:], rl)
		blk[off+6] = byte(len(name))
		blk[off+7] = ft
		copy(blk[off+8:], name)
	}
	put(0, 2, 12, ".", FTDir)
	put(12, 2, 12, "..", FTDir)
	put(24, 11, 20, "lost+found", FTDir)
	put(44, 12, 1024-44-12, "f", FTRegular)
	put(1024-12, 0, 12, "", ftCsumTail)
	f.Add(append([]byte(nil), blk...), true)
	f.Add(blk[:512], false)
	f.Add([]byte{}, true)
	for _, img := range seedImages(f) {
		f.Add(img[len(img)-1024:], true)
	}
	f.Fuzz(func(t *testing.T, b []byte, filetype bool) {
		ents, err := parseDirBlock(b, 7, filetype)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		for _, d := range ents {
			if d.Offset < 0 || d.Offset+int(d.RecLen) > len(b) || int(d.NameLen) != len(d.Name) || d.Inode == 0 || d.RecLen%4 != 0 {
				t.Fatalf("bad entry %+v in %d bytes", d, len(b))
			}
		}
	})
}

func FuzzExtents(f *testing.F) {
	root := make([]byte, 60)
	le := binary.LittleEndian
	le.PutUint16(root, extentMagic)
	le.PutUint16(root[2:], 2)
	le.PutUint16(root[4:], 4)
	le.PutUint32(root[12:], 0)
	le.PutUint16(root[16:], 8)
	le.PutUint32(root[20:], 1000)
	le.PutUint32(root[24:], 8)
	le.PutUint16(root[28:], extentInitMax+3)
	le.PutUint32(root[32:], 2000)
	f.Add(append([]byte(nil), root...))
	idx := append([]byte(nil), root...)
	le.PutUint16(idx[6:], 1)
	f.Add(idx)
	f.Add(root[:12])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ext, ix, err := parseExtentNode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if int(h.Entries) != len(ext)+len(ix) || 12+12*int(h.Max) > len(b) {
			t.Fatalf("header %+v with %d extents, %d index entries in %d bytes", h, len(ext), len(ix), len(b))
		}
		var end uint64
		for _, e := range ext {
			if e.Len == 0 || e.Len > extentInitMax || e.Logical < end {
				t.Fatalf("bad extent %+v", e)
			}
			end = e.Logical + uint64(e.Len)
		}
	})
}
