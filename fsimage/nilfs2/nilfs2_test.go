package nilfs2

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/themisfs/themis/fsimage"
)

// mkfs makes a nilfs2 image of 256 MiB (sparse) with mkfs.nilfs2 and
// returns its path.
func mkfs(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("mkfs.nilfs2")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mkfs.nilfs2 not installed (Debian nilfs-tools)")
		}
		t.Skip("mkfs.nilfs2 not installed (Debian nilfs-tools)")
	}
	img := filepath.Join(t.TempDir(), "nilfs2.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 256<<20); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-q", "-f", img)
	// Everything but the UUID comes from the clock: freeze it.
	lib := "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
	if _, err := os.Stat(lib); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("libfaketime not installed (Debian libfaketime)")
		}
		t.Skip("libfaketime not installed (Debian libfaketime)")
	}
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "FAKETIME=2001-09-09 01:46:40", "TZ=UTC")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkfs.nilfs2: %v: %s", err, out)
	}
	return img
}

// TestPinRealImage pins two images mkfs.nilfs2 made apart: they differ
// before (the random UUID) and are byte-identical after.
func TestPinRealImage(t *testing.T) {
	uuid := [16]byte{0x7e, 0x4d, 0x15, 0xfa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	var images [][]byte
	for range 2 {
		p := mkfs(t)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		supers, err := Supers(f, st.Size())
		if err != nil {
			t.Fatalf("a fresh image: %v", err)
		}
		if len(supers) != 2 || supers[0].UUID != supers[1].UUID || supers[1].Offset != st.Size()-4096 {
			t.Fatalf("superblocks %+v of a %d-byte image", supers, st.Size())
		}
		if err := Pin(f, st.Size(), uuid); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, b)
	}
	if !bytes.Equal(images[0], images[1]) {
		t.Error("two pinned images of the same mkfs differ")
	}
}

// small is an image of n bytes holding the real superblock sb at both
// places.
func small(sb []byte, n int64) []byte {
	img := make([]byte, n)
	copy(img[SuperOffset:], sb)
	copy(img[SecondaryOffset(n):], sb)
	return img
}

type memImage struct{ b []byte }

func (m *memImage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.b)) {
		return 0, errors.New("out of range")
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, errors.New("short read")
	}
	return n, nil
}

func (m *memImage) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, errors.New("out of range")
	}
	return copy(m.b[off:], p), nil
}

// realSuper is the primary superblock of an image mkfs.nilfs2 made.
func realSuper(t testing.TB) []byte {
	b, err := os.ReadFile(mkfs(t))
	if err != nil {
		t.Fatal(err)
	}
	return b[SuperOffset : SuperOffset+superSpan]
}

func TestPinRefuses(t *testing.T) {
	sb := realSuper(t)
	tests := []struct {
		name  string
		patch func(img []byte)
		size  int64
	}{
		{"too small", nil, 4096},
		{"bad magic", func(img []byte) { img[SuperOffset+offMagic] ^= 1 }, 16 << 10},
		{"s_bytes past the superblock", func(img []byte) { img[SuperOffset+offBytes+1] = 0x10 }, 16 << 10},
		{"s_bytes short of the UUID", func(img []byte) { img[SuperOffset+offBytes], img[SuperOffset+offBytes+1] = 20, 0 }, 16 << 10},
		{"bad checksum", func(img []byte) { img[SuperOffset+offSum] ^= 1 }, 16 << 10},
		{"secondary corrupt", func(img []byte) { img[SecondaryOffset(16<<10)+offUUID] ^= 1 }, 16 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := small(sb, max(tt.size, 16<<10))[:tt.size]
			if tt.patch != nil {
				tt.patch(img)
			}
			before := bytes.Clone(img)
			err := Pin(&memImage{img}, tt.size, [16]byte{1})
			if !errors.Is(err, fsimage.ErrCorrupt) {
				t.Fatalf("pin: %v, want ErrCorrupt", err)
			}
			if !bytes.Equal(img, before) {
				t.Error("a refused pin wrote to the image")
			}
		})
	}
}

// FuzzPin patches a real superblock pair: Pin either refuses with an error
// wrapping ErrCorrupt and writes nothing, or leaves both copies valid
// with the new UUID; nothing panics.
func FuzzPin(f *testing.F) {
	sb := realSuper(f)
	f.Add(uint16(0), []byte{}, uint16(16))
	for _, off := range []uint16{offMagic, offBytes, offBytes + 1, offSeed, offSum, offUUID} {
		f.Add(off, []byte{0xff}, uint16(16))
	}
	f.Fuzz(func(t *testing.T, off uint16, patch []byte, kib uint16) {
		size := int64(kib%64+1) << 10
		img := small(sb, max(size, 16<<10))[:size]
		if int(off) < len(img) {
			copy(img[off:], patch)
		}
		err := Pin(&memImage{img}, size, [16]byte{9, 9})
		if err != nil {
			if !errors.Is(err, fsimage.ErrCorrupt) {
				t.Fatalf("pin: %v, want ErrCorrupt", err)
			}
			return
		}
		supers, err := Supers(&memImage{img}, size)
		if err != nil {
			t.Fatalf("a pinned image: %v", err)
		}
		for _, s := range supers {
			if s.UUID != [16]byte{9, 9} {
				t.Fatalf("superblock at %d: UUID %x", s.Offset, s.UUID)
			}
		}
	})
}
