package scratch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrNoRoom is wrapped by WriteImage when the copy would leave its file
// system with less than Reserve free.
var ErrNoRoom = errors.New("no room for the image copy")

// Reserve is the free space, in bytes, an image copy must leave on its
// file system: the larger of 256 MiB and 5% of it.
func Reserve(st *unix.Statfs_t) int64 {
	return max(256<<20, int64(st.Blocks)*int64(st.Bsize)/20)
}

// imageChunk is how WriteImage's writer looks for holes.
const imageChunk = 1 << 20

// WriteImage writes the image src streams (size bytes: an overlay's
// WriteTo) to path (created or truncated, mode 0600) as a sparse file:
// chunks of zeros become holes. What it writes is bounded by the free
// space of path's file system less Reserve, taken before it starts; past
// that it stops with an error wrapping ErrNoRoom. On every error path is
// removed.
func WriteImage(path string, src io.WriterTo, size int64) (err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return fmt.Errorf("scratch: image copy: statfs %s: %w", filepath.Dir(path), err)
	}
	return writeImage(path, src, size, int64(st.Bavail)*int64(st.Bsize)-Reserve(&st))
}

// writeImage is WriteImage writing at most room bytes of data.
func writeImage(path string, src io.WriterTo, size, room int64) (err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("scratch: image copy: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("scratch: image copy: %w", cerr)
		}
		if err != nil {
			if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("scratch: image copy: %w", rerr))
			}
		}
	}()
	w := &sparseWriter{f: f, room: room, dir: filepath.Dir(path)}
	if _, err := src.WriteTo(w); err != nil {
		return fmt.Errorf("scratch: image copy to %s: %w", path, err)
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("scratch: image copy: %w", err)
	}
	return nil
}

// sparseWriter writes to f, seeking over chunks of zeros, and refuses to
// write more than room bytes.
type sparseWriter struct {
	f       *os.File
	room    int64 // bytes it may still write
	dir     string
	written int64
}

func (w *sparseWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), imageChunk)]
		if bytes.Equal(c, zeros[:len(c)]) {
			if _, err := w.f.Seek(int64(len(c)), io.SeekCurrent); err != nil {
				return n, err
			}
		} else {
			if w.written+int64(len(c)) > w.room {
				return n, fmt.Errorf("%s: %d bytes written, the next %d would leave less than the reserve free: %w",
					w.dir, w.written, len(c), ErrNoRoom)
			}
			m, err := w.f.Write(c)
			w.written += int64(m)
			if err != nil {
				return n + m, err
			}
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

var zeros = make([]byte, imageChunk)
