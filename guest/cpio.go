package guest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// cpioEntry is one member of a newc archive.
type cpioEntry struct {
	Name  string      // path without leading "/", e.g. "modules/order"
	Mode  fs.FileMode // type bits and permissions (fs.ModeDir, fs.ModeCharDevice|fs.ModeDevice)
	Data  []byte      // regular files only
	Major uint32      // device nodes only
	Minor uint32      // device nodes only
}

// cpioArchive collects entries and writes them as a deterministic newc
// ("070701") archive: entries sorted by name (so parents precede children),
// inode numbers assigned sequentially from 1 in that order, mtime 0,
// uid/gid 0, nlink 2 for directories and 1 otherwise.
type cpioArchive struct {
	entries map[string]cpioEntry
}

func newCPIOArchive() *cpioArchive {
	return &cpioArchive{entries: make(map[string]cpioEntry)}
}

func (a *cpioArchive) add(e cpioEntry) error {
	name := strings.TrimPrefix(path.Clean("/"+e.Name), "/")
	if name == "" {
		return errors.New("guest: cpio: empty entry name")
	}
	if _, ok := a.entries[name]; ok {
		return fmt.Errorf("guest: cpio: duplicate entry %q", name)
	}
	e.Name = name
	a.entries[name] = e
	return nil
}

// Dir adds a directory; perm may include fs.ModeSticky.
func (a *cpioArchive) Dir(name string, perm fs.FileMode) error {
	return a.add(cpioEntry{Name: name, Mode: fs.ModeDir | perm&(fs.ModePerm|fs.ModeSticky)})
}

// File adds a regular file.
func (a *cpioArchive) File(name string, perm fs.FileMode, data []byte) error {
	return a.add(cpioEntry{Name: name, Mode: perm.Perm(), Data: data})
}

// CharDev adds a character device node.
func (a *cpioArchive) CharDev(name string, perm fs.FileMode, major, minor uint32) error {
	return a.add(cpioEntry{Name: name, Mode: fs.ModeDevice | fs.ModeCharDevice | perm.Perm(), Major: major, Minor: minor})
}

// Unix file type bits as stored in c_mode.
const (
	cpioTypeReg = 0o100000
	cpioTypeDir = 0o040000
	cpioTypeChr = 0o020000
)

func cpioMode(m fs.FileMode) (uint32, error) {
	perm := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		perm |= 0o1000
	}
	switch {
	case m.IsDir():
		return cpioTypeDir | perm, nil
	case m&fs.ModeCharDevice != 0:
		return cpioTypeChr | perm, nil
	case m.IsRegular():
		return cpioTypeReg | perm, nil
	}
	return 0, fmt.Errorf("guest: cpio: unsupported file mode %v", m)
}

// WriteTo writes the archive, including the TRAILER!!! record. Parent
// directories must have been added explicitly.
func (a *cpioArchive) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if dir := path.Dir(n); dir != "." {
			if p, ok := a.entries[dir]; !ok || !p.Mode.IsDir() {
				return 0, fmt.Errorf("guest: cpio: %q: parent directory %q not in archive", n, dir)
			}
		}
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countWriter{w: bw}
	for i, n := range names {
		e := a.entries[n]
		mode, err := cpioMode(e.Mode)
		if err != nil {
			return cw.n, fmt.Errorf("%w (entry %q)", err, n)
		}
		nlink := uint32(1)
		if e.Mode.IsDir() {
			nlink = 2
		}
		if err := writeCPIORecord(cw, uint32(i+1), mode, nlink, e.Major, e.Minor, n, e.Data); err != nil {
			return cw.n, err
		}
	}
	if err := writeCPIORecord(cw, 0, 0, 1, 0, 0, "TRAILER!!!", nil); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("guest: cpio: %w", err)
	}
	return cw.n, nil
}

func writeCPIORecord(w io.Writer, ino, mode, nlink, rmajor, rminor uint32, name string, data []byte) error {
	if uint64(len(data)) > 0xffffffff {
		return fmt.Errorf("guest: cpio: %q: file too large for newc (%d bytes)", name, len(data))
	}
	// c_magic c_ino c_mode c_uid c_gid c_nlink c_mtime c_filesize
	// c_devmajor c_devminor c_rdevmajor c_rdevminor c_namesize c_check
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+4)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = append(buf, make([]byte, pad4(len(buf)))...)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("guest: cpio: write %q: %w", name, err)
	}
	if len(data) > 0 {
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("guest: cpio: write %q: %w", name, err)
		}
		if _, err := w.Write(make([]byte, pad4(len(data)))); err != nil {
			return fmt.Errorf("guest: cpio: write %q: %w", name, err)
		}
	}
	return nil
}

// pad4 returns how many bytes bring n up to a multiple of 4.
func pad4(n int) int { return (4 - n%4) % 4 }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
