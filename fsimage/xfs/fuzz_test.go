package xfs

import (
	"bytes"
	"errors"
	iofs "io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/themisfs/themis/fsimage"
)

// patched is base with patch written at off, without copying base.
type patched struct {
	base  []byte
	off   int64
	patch []byte
}

func (p *patched) ReadAt(b []byte, off int64) (int, error) {
	n := copy(b, p.base[off:])
	for i := range b[:n] {
		if j := off + int64(i) - p.off; j >= 0 && j < int64(len(p.patch)) {
			b[i] = p.patch[j]
		}
	}
	return n, nil
}

var (
	fuzzOnce sync.Once
	fuzzImg  []byte
)

// FuzzImage patches a real image and runs every reader on it: each
// error wraps a sentinel, each field found lies inside the image, and
// nothing panics.
func FuzzImage(f *testing.F) {
	fuzzOnce.Do(func() { fuzzImg = mkfsProto(f) })
	base := fuzzImg
	fs, err := Open(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint32(0), []byte{})
	for _, off := range []int64{4, 56, 84, 88, 104, 106, 120, 123, 124, 216} {
		f.Add(uint32(off), []byte{0xff})
		f.Add(uint32(off), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	}
	for _, p := range []string{"", "d", "d/f", "top"} {
		in, err := fs.Lookup(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, d := range []int64{0, 4, 5, 56, 76, 82, coreSizeV3, coreSizeV3 + 1, coreSizeV3 + 6, coreSizeV3 + 9} {
			f.Add(uint32(in.Offset+d), []byte{0xff})
			f.Add(uint32(in.Offset+d), []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		}
	}
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		if len(patch) > 4096 {
			patch = patch[:4096]
		}
		size := int64(len(base))
		r := &patched{base: base, off: int64(off) % size, patch: patch}
		fs, err := Open(r, size)
		if err != nil {
			sentinel(t, "Open", err)
			return
		}
		inside := func(what string, f Field, err error) {
			t.Helper()
			if err != nil {
				sentinel(t, what, err)
				return
			}
			if f.Phys < 0 || f.Phys >= size {
				t.Fatalf("%s = %+v, outside the image", what, f)
			}
		}
		for _, p := range []string{"", "d", "d/f", "d/g", "top", "nope/x"} {
			for name := range InodeFields {
				fl, err := fs.InodeField(p, name)
				inside("InodeField", fl, err)
			}
			for _, o := range []uint64{0, 4095, 1 << 40} {
				ph, err := fs.FileByte(p, o)
				inside("FileByte", Field{Phys: ph}, err)
			}
		}
		for name := range EntryFields {
			fl, err := fs.EntryField("d", "f", name)
			inside("EntryField", fl, err)
		}
		for name := range SuperFields {
			fl, err := fs.SuperField(name)
			inside("SuperField", fl, err)
		}
	})
}

// sentinel fails t unless err wraps one of the package's sentinels (or
// says a path is not a file or directory, which is not malformed input).
func sentinel(t *testing.T, what string, err error) {
	t.Helper()
	if errors.Is(err, fsimage.ErrCorrupt) || errors.Is(err, fsimage.ErrUnsupported) || errors.Is(err, fsimage.ErrTooLarge) ||
		errors.Is(err, iofs.ErrNotExist) || strings.Contains(err.Error(), "not a directory") || strings.Contains(err.Error(), "not a regular file") {
		return
	}
	t.Fatalf("%s: error wraps no sentinel: %v", what, err)
}
