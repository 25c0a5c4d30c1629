package inguest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// extent is bytes written at an offset of a test file.
type extent struct {
	off  int64
	data []byte
}

// sparseFile makes a file of the given size with the extents written and
// the rest left as holes.
func sparseFile(t *testing.T, path string, size int64, extents ...extent) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	for _, x := range extents {
		if _, err := f.WriteAt(x.data, x.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Skipf("a file of %d bytes is not allowed here: %v", size, err)
	}
}

// digestOf is sparseDigest of the file at path, reading at most readMax.
func digestOf(t *testing.T, path string, readMax int64) []byte {
	t.Helper()
	sum, seekErr := digestWith(t, unix.Seek, path, readMax)
	if seekErr != "" {
		t.Fatalf("lseek answered what lseek(2) rules out: %s", seekErr)
	}
	return sum
}

// digestWith is sparseDigestWith of the file at path with seek for lseek.
func digestWith(t *testing.T, seek seekFunc, path string, readMax int64) ([]byte, string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Close(fd); err != nil {
			t.Fatal(err)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	sum, seekErr, err := sparseDigestWith(seek, fd, st.Size, make([]byte, sparseChunk), readMax)
	if err != nil {
		t.Fatal(err)
	}
	return sum, seekErr
}

// TestSparseDigest checks that the digest of a large file is the same
// whether its zeros are holes or written, and differs when a byte, the
// size or a byte's offset does; and that past the read bound it is the
// size's alone.
func TestSparseDigest(t *testing.T) {
	const size = 1 << 40 // past sparseFrom, and what a far truncate makes
	head := extent{0, []byte("head")}
	mid := extent{1<<30 + 5, []byte("middle, across no chunk edge")}
	edge := extent{3*sparseChunk - 3, []byte("across a chunk edge")}
	zeros := extent{1 << 29, make([]byte, 3<<20)} // written zeros, not a hole
	base := []extent{head, mid, edge}
	tests := []struct {
		name    string
		size    int64
		extents []extent
		readMax int64
		same    bool // the same digest as base's
	}{
		{"the same file", size, base, sparseReadMax, true},
		{"written zeros where base has a hole", size, append([]extent{zeros}, base...), sparseReadMax, true},
		{"one byte more", size, append([]extent{{7 << 30, []byte{1}}}, base...), sparseReadMax, false},
		{"one byte other", size, []extent{head, mid, {edge.off, []byte("across a chunk edgE")}}, sparseReadMax, false},
		{"an extent moved by a byte", size, []extent{head, {mid.off + 1, mid.data}, edge}, sparseReadMax, false},
		{"a byte longer", size + 1, base, sparseReadMax, false},
	}
	dir := t.TempDir()
	sparseFile(t, filepath.Join(dir, "base"), size, base...)
	want := digestOf(t, filepath.Join(dir, "base"), sparseReadMax)
	if bytes.Equal(want, sparseUnread(size)) {
		t.Fatal("base's digest is the unread one")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			sparseFile(t, p, tc.size, tc.extents...)
			if got := digestOf(t, p, tc.readMax); bytes.Equal(got, want) != tc.same {
				t.Errorf("digest %x, base's %x: equal %v, want %v", got, want, !tc.same, tc.same)
			}
		})
	}
	t.Run("past the read bound", func(t *testing.T) {
		p := filepath.Join(dir, "base")
		if got := digestOf(t, p, sparseChunk); !bytes.Equal(got, sparseUnread(size)) {
			t.Errorf("digest read past %d bytes of data = %x, want the unread digest %x", sparseChunk, got, sparseUnread(size))
		}
	})
}

// TestFingerprintLargeFile checks the walk's content hashes on either side
// of sparseFrom: the plain blake3 of the bytes up to it, the sparse digest
// past it (a terabyte file, walked without reading its holes).
func TestFingerprintLargeFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	sparseFile(t, small, sparseFrom, extent{5, []byte("data")})
	sparseFile(t, filepath.Join(dir, "large"), 1<<40, extent{5, []byte("data")})
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Close(fd); err != nil {
			t.Fatal(err)
		}
	}()
	res, err := fingerprint(fd, agentv1.TimeMode_TIME_MODE_ALL, true)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(small)
	if err != nil {
		t.Fatal(err)
	}
	plain := blake3.Sum256(data)
	want := map[string][]byte{"small": plain[:], "large": digestOf(t, filepath.Join(dir, "large"), sparseReadMax)}
	seen := 0
	for _, e := range res.GetLeaves() {
		w, ok := want[e.GetPath()]
		if !ok {
			continue
		}
		seen++
		if !bytes.Equal(e.GetContentHash(), w) {
			t.Errorf("%s: content hash %x, want %x", e.GetPath(), e.GetContentHash(), w)
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the files %v among the leaves, want all", seen, want)
	}
}

// TestNextChunk: the walk over a file's chunks ends at its last one, also
// where the chunk after it would pass 2^63 (a far write at 2^63-4097, as
// the hunt's xfs lane made: the file read EINVAL before), and a chunk's
// read never asks past the file's end.
func TestNextChunk(t *testing.T) {
	const far = 1<<63 - 4082 // a file's size after 15 bytes at 2^63-4097
	lastFar := int64(far) &^ (sparseChunk - 1)
	tests := []struct {
		c, size, want int64
	}{
		{0, 1 << 30, sparseChunk},
		{1<<30 - sparseChunk, 1 << 30, 1 << 30},
		{1<<30 - 2*sparseChunk, 1 << 30, 1<<30 - sparseChunk},
		{0, 100, 100},
		{lastFar, far, far},
		{lastFar - sparseChunk, far, lastFar},
	}
	for _, tt := range tests {
		got := nextChunk(tt.c, tt.size)
		if got != tt.want || got < tt.c {
			t.Errorf("nextChunk(%d, %d) = %d, want %d", tt.c, tt.size, got, tt.want)
		}
		if n := min(sparseChunk, tt.size-tt.c); n <= 0 || tt.c+n > tt.size || tt.c+n < 0 {
			t.Errorf("chunk at %d of %d: a read of %d bytes", tt.c, tt.size, n)
		}
	}
}

// TestSparseDigestWrongSeek: where lseek answers what lseek(2) rules out
// (btrfs's SEEK_HOLE of -2^63 for data ending at 2^63, a hole past the
// size, data before the offset asked), the digest says so and is the
// file's all the same: the walk reads what the answer left in doubt (to
// the end: the data lies near it, as btrfs's at 2^63 does).
func TestSparseDigestWrongSeek(t *testing.T) {
	const size = 1 << 40
	path := filepath.Join(t.TempDir(), "f")
	sparseFile(t, path, size, extent{size - 10*sparseChunk, []byte("first")}, extent{size - 2*sparseChunk + 5, []byte("tail")})
	want := digestOf(t, path, sparseReadMax)
	for _, tt := range []struct {
		name   string
		whence int
		answer func(off int64) int64
		says   string
	}{
		{"hole-negative", unix.SEEK_HOLE, func(int64) int64 { return -1 << 63 }, "SEEK_HOLE) = -9223372036854775808: want a hole past the data"},
		{"hole-at-data", unix.SEEK_HOLE, func(off int64) int64 { return off }, "want a hole past the data at 1099510972416"},
		{"hole-past-size", unix.SEEK_HOLE, func(int64) int64 { return size + 1 }, "at most the size 1099511627776"},
		{"data-before-offset", unix.SEEK_DATA, func(off int64) int64 {
			if off < size-10*sparseChunk {
				return size - 10*sparseChunk
			}
			return off - sparseChunk
		}, "SEEK_DATA) = 1099510972416: data before the offset asked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wrong := func(fd int, off int64, whence int) (int64, error) {
				if whence == tt.whence {
					return tt.answer(off), nil
				}
				return unix.Seek(fd, off, whence)
			}
			got, seekErr := digestWith(t, wrong, path, sparseReadMax)
			if !strings.Contains(seekErr, tt.says) {
				t.Errorf("seek error %q, want it to say %q", seekErr, tt.says)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the digest with a wrong lseek differs from the file's")
			}
		})
	}
}
