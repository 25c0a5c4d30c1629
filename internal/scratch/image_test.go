package scratch

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// image is a WriterTo streaming b in 1 MiB writes, like overlay.Device.
type image []byte

func (im image) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for off := 0; off < len(im); off += 1 << 20 {
		m, err := w.Write(im[off:min(off+1<<20, len(im))])
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestWriteImage(t *testing.T) {
	const mib = 1 << 20
	data := make(image, 8*mib)
	copy(data[3*mib:], bytes.Repeat([]byte{0xa5}, 4096)) // one chunk of data, the rest holes
	data[len(data)-1] = 1
	for _, tc := range []struct {
		name      string
		room      int64
		wantErr   error
		maxBlocks int64 // allocated 512-byte blocks at most
	}{
		{"sparse", 64 * mib, nil, 2 * 2 * mib / 512},
		{"exactly the data", 2 * mib, nil, 2 * 2 * mib / 512},
		{"no room", mib, ErrNoRoom, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lane.img")
			err := writeImage(path, data, int64(len(data)), tc.room)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("writeImage: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused copy left its file: %v", err)
				}
				return
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Error("the copy differs from the image")
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if b := fi.Sys().(*syscall.Stat_t).Blocks; b > tc.maxBlocks {
				t.Errorf("%d blocks allocated, want at most %d (holes for the zeros)", b, tc.maxBlocks)
			}
		})
	}
}

func TestWriteImageOverwrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lane.img")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xff}, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteImage(path, make(image, 1<<20), 1<<20); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, 1<<20)) {
		t.Errorf("an old copy's bytes survived: %d bytes, non-zero %v", len(got), !bytes.Equal(got, make([]byte, len(got))))
	}
}
