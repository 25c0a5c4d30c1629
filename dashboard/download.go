package dashboard

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/runs/export"
	"github.com/themisfs/themis/session"
)

// Bounds of the downloads.
const (
	// MaxCrashImage bounds a crash image the dashboard sends (the disk of
	// one lane).
	MaxCrashImage = 4 << 30
	// MaxBundleFiles bounds a bundle's reproducer files, all together
	// (the crash image is bounded apart).
	MaxBundleFiles = 64 << 20
	// MaxExports bounds the exports the dashboard runs at once (each
	// replays in a guest of its own); a download waits for its turn.
	MaxExports = 2
	// writeStall is how long one write to a download may block before the
	// client counts as gone (the export holds a guest meanwhile).
	writeStall = time.Minute
)

// errTooLarge: what an export sends is past this file's bounds.
var errTooLarge = errors.New("past the dashboard's download bounds")

// download is one export streamed to a client: headers once the first
// byte is known, each write bounded by writeStall.
type download struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	header  func(h http.Header, size int64) // sets the headers; size -1: unknown
	started bool
}

// start sends the headers (size -1: no Content-Length).
func (d *download) start(size int64) {
	d.header(d.w.Header(), size)
	if size >= 0 {
		d.w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	d.w.WriteHeader(http.StatusOK)
	d.started = true
}

// Write implements io.Writer.
func (d *download) Write(p []byte) (int, error) {
	if !d.started {
		d.start(-1)
	}
	_ = d.rc.SetWriteDeadline(time.Now().Add(writeStall)) // unsupported: no bound but the request's
	return d.w.Write(p)
}

// sparse writes an image sent in chunks of ascending offsets, zeros left
// out between them, to w: the zeros written back.
type sparse struct {
	w         io.Writer
	size, pos int64
}

// chunk writes data at off (not before what is written).
func (s *sparse) chunk(off int64, data []byte) error {
	if off < s.pos || off+int64(len(data)) > s.size {
		return fmt.Errorf("crash image: a chunk at %d of %d bytes (written to %d of %d)", off, len(data), s.pos, s.size)
	}
	if err := s.zeros(off); err != nil {
		return err
	}
	n, err := s.w.Write(data)
	s.pos += int64(n)
	return err
}

// zeros writes zeros up to to.
func (s *sparse) zeros(to int64) error {
	n, err := io.CopyN(s.w, zeroReader{}, to-s.pos)
	s.pos += n
	return err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// fileName is id as a file name: what is not a letter, digit, dot, dash
// or underscore becomes "_".
func fileName(id string) string {
	return strings.Map(func(r rune) rune {
		if r < 128 && (r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, id)
}

// attachment is the headers of a download named name.
func attachment(name, contentType string) func(http.Header, int64) {
	return func(h http.Header, _ int64) {
		h.Set("Content-Type", contentType)
		h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
		h.Set("Cache-Control", "no-store")
	}
}

// exportFinding runs the export of the finding the request names with the
// sinks sinks makes over d, then done; errors before the first byte are
// answered, after it the download is cut off (a client must not take a
// short file for the whole).
func (h *handler) exportFinding(w http.ResponseWriter, r *http.Request, crashOnly bool, sinks func(f *session.Finding, d *download) (export.Sinks, func() error)) {
	if !sameOrigin(r) {
		http.Error(w, "a download starts from the dashboard's own pages", http.StatusForbidden)
		return
	}
	f, err := h.st.Finding(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	if crashOnly && f.Kind != session.KindCrash {
		http.Error(w, "not a crash finding: it has no crash image", http.StatusNotFound)
		return
	}
	if !h.enter() {
		http.Error(w, "the daemon is stopping", http.StatusServiceUnavailable)
		return
	}
	defer h.running.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(h.stopping, cancel)()
	defer cancel()
	if err := h.turn(ctx); err != nil {
		http.Error(w, "waiting for an export: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer func() { <-h.exports }()
	d := &download{w: w, rc: http.NewResponseController(w)}
	defer func() { _ = d.rc.SetWriteDeadline(time.Time{}) }() // the connection may serve another request
	out, done := sinks(f, d)
	if _, err = h.st.Export(ctx, f, export.Options{}, out); err == nil {
		err = done()
	}
	switch {
	case err == nil:
	case !d.started:
		h.fail(w, fmt.Errorf("export %s: %w", f.ID, err))
	default:
		h.log.Warn("dashboard: download cut off", zap.String("finding", f.ID), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
}

// enter counts an export in, unless Close was called.
func (h *handler) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.running.Add(1)
	return true
}

// turn waits for one of MaxExports turns, or ctx.
func (h *handler) turn(ctx context.Context) error {
	select {
	case h.exports <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bundle sends a finding's reproducer (what `themisctl findings export`
// writes: the Export a client calls) as ID.tar.gz, its files under ID/.
func (h *handler) bundle(w http.ResponseWriter, r *http.Request) {
	h.exportFinding(w, r, false, func(f *session.Finding, d *download) (export.Sinks, func() error) {
		name := fileName(f.ID)
		d.header = attachment(name+".tar.gz", "application/gzip")
		b := &tarBundle{dir: name}
		b.gz = gzip.NewWriter(d)
		b.tw = tar.NewWriter(b.gz)
		return export.Sinks{File: b.file, Image: b.image}, b.close
	})
}

// crashImage sends a crash finding's crash state as ID-crash.img.
func (h *handler) crashImage(w http.ResponseWriter, r *http.Request) {
	h.exportFinding(w, r, true, func(f *session.Finding, d *download) (export.Sinks, func() error) {
		d.header = attachment(fileName(f.ID)+"-"+export.CrashImage, "application/octet-stream")
		var img *sparse
		return export.Sinks{
				File: func(string, bool, []byte) error { return nil },
				Image: func(off int64, data []byte, size int64) error {
					if img == nil {
						if size < 0 || size > MaxCrashImage {
							return fmt.Errorf("crash image of %d bytes: at most %d: %w", size, MaxCrashImage, errTooLarge)
						}
						d.start(size)
						img = &sparse{w: d, size: size}
					}
					return img.chunk(off, data)
				}},
			func() error {
				if img == nil {
					return errors.New("the export sent no crash image")
				}
				return img.zeros(img.size)
			}
	})
}

// tarBundle writes an export's files, and a crash finding's image, into a
// gzipped tar under dir.
type tarBundle struct {
	dir   string
	gz    *gzip.Writer
	tw    *tar.Writer
	img   *sparse // the crash image, while it is written
	files int64   // the files' bytes so far
}

func (b *tarBundle) header(name string, mode, size int64) error {
	return b.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: b.dir + "/" + name, Mode: mode, Size: size, ModTime: time.Now().Truncate(time.Second), Format: tar.FormatPAX})
}

// file adds one reproducer file.
func (b *tarBundle) file(name string, exec bool, data []byte) error {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return fmt.Errorf("bundle: a file named %q", name)
	}
	if b.files += int64(len(data)); b.files > MaxBundleFiles {
		return fmt.Errorf("bundle: files of more than %d bytes: %w", MaxBundleFiles, errTooLarge)
	}
	if err := b.endImage(); err != nil {
		return err
	}
	mode := int64(0o644)
	if exec {
		mode = 0o755
	}
	if err := b.header(name, mode, int64(len(data))); err != nil {
		return err
	}
	_, err := b.tw.Write(data)
	return err
}

// image adds a chunk of the crash image.
func (b *tarBundle) image(off int64, data []byte, size int64) error {
	if b.img == nil {
		if size < 0 || size > MaxCrashImage {
			return fmt.Errorf("crash image of %d bytes: at most %d: %w", size, MaxCrashImage, errTooLarge)
		}
		if err := b.header(export.CrashImage, 0o644, size); err != nil {
			return err
		}
		b.img = &sparse{w: b.tw, size: size}
	}
	return b.img.chunk(off, data)
}

// endImage writes the crash image's last zeros, if one is being written.
func (b *tarBundle) endImage() error {
	if b.img == nil || b.img.pos == b.img.size {
		return nil
	}
	return b.img.zeros(b.img.size)
}

// close ends the image, the tar and the gzip stream.
func (b *tarBundle) close() error {
	return errors.Join(b.endImage(), b.tw.Close(), b.gz.Close())
}
