package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// maxExportFile bounds one file of an export the daemon sends (the crash
// image is bounded by its lane, in imageFile).
const maxExportFile = 64 << 20

// exportName is the grammar of a file name an export writes: a plain name,
// no directory, no dot first.
var exportName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// exportWriter writes an Export stream's files and crash image under
// root: each file new (O_EXCL: none replaced, no symlink followed), its
// chunks in order, its size bounded; nothing the daemon sends is trusted to
// be a path.
type exportWriter struct {
	root  *os.Root
	files map[string]*exportFile
	img   *imageFile
}

// exportFile is one file being written.
type exportFile struct {
	f          *os.File
	next, size int64
}

func newExportWriter(root *os.Root) *exportWriter {
	return &exportWriter{root: root, files: map[string]*exportFile{}, img: &imageFile{path: "crash.img", root: root}}
}

// file writes one chunk of a file.
func (w *exportWriter) file(ch *themisv1.ExportFile) error {
	name := ch.GetName()
	if !exportName.MatchString(name) || name == "crash.img" {
		return fmt.Errorf("export: the daemon sent a file named %q: not a plain file name", name)
	}
	ef := w.files[name]
	if ef == nil {
		if ch.GetOffset() != 0 || ch.GetSize() < 0 || ch.GetSize() > maxExportFile {
			return fmt.Errorf("export: %s: first chunk at %d of a file of %d bytes (at most %d)", name, ch.GetOffset(), ch.GetSize(), maxExportFile)
		}
		mode := os.FileMode(0o644)
		if ch.GetExecutable() {
			mode = 0o755
		}
		f, err := w.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		ef = &exportFile{f: f, size: ch.GetSize()}
		w.files[name] = ef
	}
	if ch.GetOffset() != ef.next || ch.GetSize() != ef.size || ef.next+int64(len(ch.GetData())) > ef.size {
		return fmt.Errorf("export: %s: a chunk of %d bytes at %d of %d, want one at %d within the file's %d", name, len(ch.GetData()), ch.GetOffset(), ch.GetSize(), ef.next, ef.size)
	}
	if _, err := ef.f.Write(ch.GetData()); err != nil {
		return fmt.Errorf("--out: %s: %w", name, err)
	}
	ef.next += int64(len(ch.GetData()))
	return nil
}

// image writes one chunk of a crash finding's crash.img.
func (w *exportWriter) image(ch *themisv1.CrashImageChunk) error { return w.img.write(ch) }

// finish checks that every file is whole and that the files written are
// the ones the summary names, and closes them.
func (w *exportWriter) finish(names []string) error {
	for name, ef := range w.files {
		if ef.next != ef.size {
			return fmt.Errorf("export: %s: %d of its %d bytes came", name, ef.next, ef.size)
		}
		if !slices.Contains(names, name) {
			return fmt.Errorf("export: %s written but not in the daemon's summary %v", name, names)
		}
	}
	if err := w.img.finish(); err != nil {
		return err
	}
	return w.close()
}

// remove closes and removes the files written (not the crash image).
func (w *exportWriter) remove() {
	for name, ef := range w.files {
		if ef.f != nil {
			ef.f.Close()
			ef.f = nil
		}
		w.root.Remove(name)
	}
}

// close closes what is open (after finish: nothing) and the root.
func (w *exportWriter) close() error {
	var errs []error
	for _, ef := range w.files {
		if ef.f != nil {
			errs = append(errs, ef.f.Close())
			ef.f = nil
		}
	}
	w.img.close()
	if w.root != nil {
		errs = append(errs, w.root.Close())
		w.root = nil
	}
	return errors.Join(errs...)
}
