package btrfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	iofs "io/fs"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/themisfs/themis/fsimage"
)

// patched reads base with patch written over it at off: a mutated image
// without copying the 16 MiB.
type patched struct {
	base  []byte
	off   int64
	patch []byte
}

func (p *patched) ReadAt(b []byte, off int64) (int, error) {
	n, err := bytes.NewReader(p.base).ReadAt(b, off)
	// Overlay the patch where it meets [off, off+n).
	lo, hi := max(off, p.off), min(off+int64(n), p.off+int64(len(p.patch)))
	if lo < hi {
		copy(b[lo-off:hi-off], p.patch[lo-p.off:hi-p.off])
	}
	return n, err
}

var (
	fuzzOnce sync.Once
	fuzzImg  []byte
	fuzzErr  error
)

// fuzzBase is a small mixed image with a few files, made once.
func fuzzBase(f *testing.F) []byte {
	fuzzOnce.Do(func() {
		p := mkfsTree(f, tree{"d": nil, "d/f": bytes.Repeat([]byte{'A'}, 4096), "d/g": {}, "small": []byte("inline")}, 16, "--mixed")
		fuzzImg, fuzzErr = os.ReadFile(p)
	})
	if fuzzErr != nil {
		f.Fatal(fuzzErr)
	}
	return fuzzImg
}

// exercise runs every reader on r, checking the error contracts and
// that nothing panics.
func exercise(t *testing.T, r *patched, size int64, verify bool) {
	fs, err := open(r, size, verify)
	if err != nil {
		if !errors.Is(err, fsimage.ErrCorrupt) && !errors.Is(err, fsimage.ErrUnsupported) && !errors.Is(err, fsimage.ErrTooLarge) {
			t.Fatalf("Open: error wraps no sentinel: %v", err)
		}
		return
	}
	for _, p := range []string{"", "d", "d/f", "d/g", "small", "nope"} {
		ino, err := fs.Lookup(p)
		if err != nil {
			continue
		}
		_, _ = fs.Inode(ino)
		_, _ = fs.Extents(ino)
		_, _ = fs.ReadFile(ino, 1<<16)
		for _, off := range []uint64{0, 1, 4095, 1 << 40} {
			loc, err := fs.FileByte(p, off)
			if err == nil && (loc.Phys < 0 || loc.Phys >= size) {
				t.Fatalf("FileByte(%q, %d) = %d, outside the image", p, off, loc.Phys)
			}
			if err != nil && !errors.Is(err, fsimage.ErrCorrupt) && !errors.Is(err, fsimage.ErrUnsupported) &&
				!errors.Is(err, fsimage.ErrTooLarge) && !errors.Is(err, iofs.ErrNotExist) && !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("FileByte: %v", err)
			}
		}
	}
	exerciseFields(t, fs, size)
	var next uint64
	for _, reg := range fs.Layout() {
		if reg.FirstLBA != next || reg.Sectors == 0 {
			t.Fatalf("layout is not a partition at %+v", reg)
		}
		next = reg.End()
	}
	_ = fs.Locate(1 << 40)
}

// exerciseFields locates every field the corruption targets use: each
// found lies inside the image.
func exerciseFields(t *testing.T, fs *FS, size int64) {
	inside := func(what string, f Field, err error) {
		t.Helper()
		if err == nil && (f.Phys < 0 || f.Phys+int64(f.Size) > size) {
			t.Fatalf("%s = %+v, outside the image", what, f)
		}
	}
	for name := range SuperFields {
		f, err := fs.SuperField(name)
		inside("SuperField", f, err)
	}
	for _, p := range []string{"d/f", "d", "small"} {
		for name := range InodeFields {
			f, err := fs.InodeField(p, name)
			inside("InodeField", f, err)
		}
		f, err := fs.HeaderField(p, "bytenr")
		inside("HeaderField", f, err)
		f, err = fs.DirItemField("d", "f", "name_len")
		inside("DirItemField", f, err)
	}
	f, err := fs.BlockGroupField("used")
	inside("BlockGroupField", f, err)
}

// FuzzImage patches a real image (checksums not verified, so the parsers
// behind them are reached) and runs every reader on it.
func FuzzImage(f *testing.F) {
	base := fuzzBase(f)
	fs, err := Open(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		f.Fatal(err)
	}
	var u64 [8]byte
	binary.LittleEndian.PutUint64(u64[:], 1<<62)
	f.Add(uint32(0), []byte{})
	for _, off := range []int64{SuperblockOffset + 0x50, SuperblockOffset + 0x58, SuperblockOffset + 0x90, SuperblockOffset + 0xA0,
		SuperblockOffset + sysChunkArrayOffset, SuperblockOffset + sysChunkArrayOffset + 17 + 44} {
		f.Add(uint32(off), []byte{0xff})
		f.Add(uint32(off), u64[:])
	}
	for _, l := range []uint64{fs.sb.Root, fs.sb.ChunkRoot, fs.fsRoot} {
		p, err := fs.Physical(l)
		if err != nil {
			f.Fatal(err)
		}
		for _, d := range []int64{48, 96, 100, headerSize, headerSize + 17, headerSize + 21, headerSize + itemSize + 17} {
			f.Add(uint32(p[0]+d), []byte{0xff, 0xff})
			f.Add(uint32(p[0]+d), u64[:])
		}
	}
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		if len(patch) > 4096 {
			patch = patch[:4096]
		}
		r := &patched{base: base, off: int64(off) % int64(len(base)), patch: patch}
		exercise(t, r, int64(len(base)), false)
		exercise(t, r, int64(len(base)), true)
	})
}

// FuzzSysChunks runs the superblock and system chunk array parsers on
// arbitrary bytes.
func FuzzSysChunks(f *testing.F) {
	base := fuzzBase(f)
	f.Add(append([]byte(nil), base[SuperblockOffset:SuperblockOffset+SuperblockSize]...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < SuperblockSize {
			b = append(b, make([]byte, SuperblockSize-len(b))...)
		}
		if _, err := parseSuperblock(b, false); err != nil && !errors.Is(err, fsimage.ErrCorrupt) && !errors.Is(err, fsimage.ErrUnsupported) {
			t.Fatal(err)
		}
		if cs, err := parseSysChunks(b); err == nil {
			for _, c := range cs {
				if len(c.Stripes) == 0 || c.Length == 0 {
					t.Fatalf("chunk %+v", c)
				}
			}
		} else if !errors.Is(err, fsimage.ErrCorrupt) {
			t.Fatal(err)
		}
	})
}
