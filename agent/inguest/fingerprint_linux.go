package inguest

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/oracle"
)

// walkOpen are the open flags of the fingerprint walk: never follow a final
// symlink, never block on a FIFO, and do not change atimes by looking.
const walkOpen = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOATIME

// fingerprint walks the tree under the directory fd dir without following
// symlinks and folds it. The root itself is the entry with path "".
//
// The walk does not change atimes of directories and regular files
// (O_NOATIME). Reading a symlink's target updates its atime as the mount's
// atime rules say; its leaf is taken after the read.
func fingerprint(dir int, mode agentv1.TimeMode, withLeaves bool) (*agentv1.FingerprintResult, error) {
	w := walker{buf: make([]byte, 64<<10)}
	if err := w.walk(dir); err != nil {
		return nil, err
	}
	return folded(w.entries, mode, withLeaves), nil
}

// fingerprintUpper walks an overlay upper layer from below: the tree under
// the directory fd dir (whose absolute path is base, for the xattr calls),
// with every entry's device number and overlay.* xattrs, classified by
// oracle.NormalizeUpper before anything looks at its type, then folded. An
// entry carrying overlay.metacopy fails the walk: its data is not in this
// layer, and the walk would record an empty file.
func fingerprintUpper(dir int, base string, mode agentv1.TimeMode, withLeaves bool) (*agentv1.FingerprintResult, error) {
	w := walker{buf: make([]byte, 64<<10), below: base}
	if err := w.walk(dir); err != nil {
		return nil, err
	}
	ups := make([]oracle.UpperEntry, len(w.entries))
	for i, e := range w.entries {
		x := w.extra[i]
		if oracle.HasMetacopy(x.xattrs) {
			return nil, errorf(unix.EINVAL, "%s: upper layer entry carries overlay.metacopy: its data is in the lower layer, so this layer would record an empty file (the lane must be mounted with metacopy=off)", displayPath(e.GetPath()))
		}
		ups[i] = oracle.UpperEntry{Entry: e, Rdev: x.rdev, Xattrs: x.xattrs}
	}
	return folded(oracle.NormalizeUpper(ups), mode, withLeaves), nil
}

// folded folds entries into a result, with the entries sorted by path as
// its leaves if asked for, and counts the unreadable ones.
func folded(entries []*agentv1.Entry, mode agentv1.TimeMode, withLeaves bool) *agentv1.FingerprintResult {
	sum := oracle.Fold(entries, mode)
	res := &agentv1.FingerprintResult{Root: sum[:], Entries: uint64(len(entries))}
	for _, e := range entries {
		if e.GetReadErrno() == 0 {
			continue
		}
		if res.Unreadable == 0 {
			res.FirstUnreadable, res.FirstUnreadableErrno = e.GetPath(), e.GetReadErrno()
		}
		res.Unreadable++
	}
	if withLeaves {
		slices.SortFunc(entries, func(a, b *agentv1.Entry) int { return strings.Compare(a.Path, b.Path) })
		res.Leaves = entries
	}
	return res
}

// openNoatime opens name under dir with walkOpen|extra, dropping O_NOATIME
// where the caller may not use it (EPERM: not the owner and not root).
func openNoatime(dir int, name string, extra int) (int, error) {
	fd, err := unix.Openat(dir, name, walkOpen|extra, 0)
	if errors.Is(err, unix.EPERM) {
		fd, err = unix.Openat(dir, name, walkOpen&^unix.O_NOATIME|extra, 0)
	}
	return fd, err
}

type walker struct {
	entries []*agentv1.Entry
	buf     []byte // read buffer for contents and directory entries
	// below, when set, is the absolute path of the walk's root: the walk
	// is of an overlay upper layer, and extra gets each entry's device
	// number and overlay.* xattrs (read by path: there are no fd-relative
	// l*xattr calls).
	below string
	extra []belowInfo // parallel to entries when below is set
}

// belowInfo is what classifying an upper-layer entry needs beyond its Entry.
type belowInfo struct {
	rdev   uint64
	xattrs map[string][]byte
}

// walk walks the tree under the directory fd dir.
func (w *walker) walk(dir int) error {
	// A fresh descriptor: its own directory offset, and O_NOATIME.
	root, err := openNoatime(dir, ".", unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("open root: %w", err)
	}
	err = w.root(root)
	if cerr := unix.Close(root); cerr != nil && err == nil {
		err = fmt.Errorf("close root: %w", cerr)
	}
	return err
}

func (w *walker) root(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat root: %w", err)
	}
	e := entryOf("", &st)
	if err := w.add(e, &st); err != nil {
		return err
	}
	return w.dir(fd, e)
}

// add appends an entry and, walking from below, its device number and
// overlay xattrs.
func (w *walker) add(e *agentv1.Entry, st *unix.Stat_t) error {
	w.entries = append(w.entries, e)
	if w.below == "" {
		return nil
	}
	x, err := overlayXattrs(filepath.Join(w.below, e.GetPath()), w.buf)
	if err != nil {
		return fmt.Errorf("%s: %w", displayPath(e.GetPath()), err)
	}
	w.extra = append(w.extra, belowInfo{rdev: st.Rdev, xattrs: x})
	return nil
}

// dir adds the entries below the open directory fd, whose entry is de. A
// directory the filesystem will not list gets its errno (fsErrno) and no
// entries below it.
func (w *walker) dir(fd int, de *agentv1.Entry) error {
	prefix := de.GetPath()
	names, err := w.names(fd)
	if err != nil {
		return unreadableAs(de, fmt.Errorf("%s: read directory: %w", displayPath(prefix), err))
	}
	slices.Sort(names)
	for _, name := range names {
		if err := w.child(fd, name, path.Join(prefix, name)); err != nil {
			return err
		}
	}
	return nil
}

// child adds the entry name under the open directory fd, whose path is p,
// and what is below it. What the filesystem refuses to read (fsErrno) is
// the entry's errno, not an error.
func (w *walker) child(fd int, name, p string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		e := &agentv1.Entry{Path: p}
		if err := unreadableAs(e, fmt.Errorf("%s: stat: %w", p, err)); err != nil {
			return err
		}
		return w.add(e, &unix.Stat_t{})
	}
	e := entryOf(p, &st)
	if err := w.add(e, &st); err != nil {
		return err
	}
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if e.ContentHash, e.SeekError, err = w.content(fd, name, st.Size); err != nil {
			return unreadableAs(e, fmt.Errorf("%s: %w", p, err))
		}
	case unix.S_IFLNK:
		if e.SymlinkTarget, err = readlinkat(fd, name); err != nil {
			return unreadableAs(e, fmt.Errorf("%s: readlink: %w", p, err))
		}
		// readlink(2) touches the link's atime and cannot be told not
		// to; report the state after the read, so that walking again
		// (under the same relatime rules) gives the same leaf.
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: stat: %w", p, err)
		}
		after := entryOf(p, &st)
		after.SymlinkTarget = e.SymlinkTarget
		w.entries[len(w.entries)-1] = after
	case unix.S_IFDIR:
		sub, err := openNoatime(fd, name, unix.O_DIRECTORY)
		if err != nil {
			return unreadableAs(e, fmt.Errorf("%s: open: %w", p, err))
		}
		err = w.dir(sub, e)
		if cerr := unix.Close(sub); cerr != nil && err == nil {
			err = fmt.Errorf("%s: close: %w", p, cerr)
		}
		return err
	}
	return nil
}

// unreadableAs records err's errno on e when it is the filesystem's answer
// about the entry (fsErrno) and returns nil; any other err is returned.
func unreadableAs(e *agentv1.Entry, err error) error {
	n := fsErrno(err)
	if n == 0 {
		return err
	}
	e.ReadErrno = n
	e.ContentHash, e.SymlinkTarget = nil, ""
	return nil
}

// fsErrno is the errno in err when it is the filesystem's answer about an
// entry (EIO, EUCLEAN, EBADMSG, ENOENT for a listed name, ...): anything
// but the walker's own limits (ENOMEM, EMFILE, ENFILE, ENOBUFS) and
// EINTR. 0 otherwise.
func fsErrno(err error) uint32 {
	var n unix.Errno
	if !errors.As(err, &n) {
		return 0
	}
	switch n {
	case unix.ENOMEM, unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.EINTR:
		return 0
	}
	return uint32(n)
}

// names lists a directory without "." and "..".
func (w *walker) names(fd int) ([]string, error) {
	var names []string
	for {
		n, err := unix.Getdents(fd, w.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(w.buf[:n], -1, names)
	}
}

// content returns the blake3-256 of the regular file name under dir, or
// its sparseDigest (and what lseek answered wrong) when stat said it is
// larger than sparseFrom.
func (w *walker) content(dir int, name string, size int64) (sum []byte, seekErr string, err error) {
	fd, err := openNoatime(dir, name, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open: %w", err)
	}
	if size > sparseFrom {
		sum, seekErr, err = sparseDigest(fd, size, w.buf, sparseReadMax)
		if cerr := unix.Close(fd); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
		return sum, seekErr, err
	}
	h := blake3.New()
	for {
		n, rerr := unix.Read(fd, w.buf)
		if errors.Is(rerr, unix.EINTR) {
			continue
		}
		if rerr != nil {
			err = fmt.Errorf("read: %w", rerr)
			break
		}
		if n <= 0 {
			break
		}
		if _, herr := h.Write(w.buf[:n]); herr != nil {
			err = fmt.Errorf("hash: %w", herr)
			break
		}
	}
	if cerr := unix.Close(fd); cerr != nil && err == nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return nil, "", err
	}
	return h.Sum(nil), "", nil
}

func entryOf(p string, st *unix.Stat_t) *agentv1.Entry {
	return &agentv1.Entry{
		Path:  p,
		Kind:  kindOf(st.Mode),
		Mode:  st.Mode & 0o7777,
		Uid:   st.Uid,
		Gid:   st.Gid,
		Nlink: uint64(st.Nlink),
		Size:  st.Size,
		Atime: timespec(st.Atim),
		Mtime: timespec(st.Mtim),
		Ctime: timespec(st.Ctim),
	}
}

func displayPath(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

// overlayXattrPrefixes are the namespaces overlayfs keeps its xattrs in
// (user.* on a mount with userxattr).
var overlayXattrPrefixes = []string{"trusted.overlay.", "user.overlay."}

// overlayXattrs returns the overlay.* extended attributes of p without
// following a final symlink; nil when it has none or its filesystem keeps
// no xattrs. buf is scratch space.
func overlayXattrs(p string, buf []byte) (map[string][]byte, error) {
	names, err := listXattrs(p, buf)
	if err != nil {
		return nil, err
	}
	var out map[string][]byte
	for _, name := range names {
		overlay := false
		for _, pre := range overlayXattrPrefixes {
			overlay = overlay || strings.HasPrefix(name, pre)
		}
		if !overlay {
			continue
		}
		v, err := getXattr(p, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed between the list and the read
		}
		if err != nil {
			return nil, fmt.Errorf("lgetxattr %s: %w", name, err)
		}
		if out == nil {
			out = make(map[string][]byte)
		}
		out[name] = v
	}
	return out, nil
}

// listXattrs lists the xattr names of p (llistxattr).
func listXattrs(p string, buf []byte) ([]string, error) {
	for {
		n, err := unix.Llistxattr(p, buf)
		switch {
		case errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case errors.Is(err, unix.ERANGE):
			sz, err := unix.Llistxattr(p, nil)
			if err != nil {
				return nil, fmt.Errorf("llistxattr: %w", err)
			}
			buf = make([]byte, sz+64)
			continue
		case err != nil:
			return nil, fmt.Errorf("llistxattr: %w", err)
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				names = append(names, name)
			}
		}
		return names, nil
	}
}

// getXattr reads one xattr of p (lgetxattr).
func getXattr(p, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err := unix.Lgetxattr(p, name, nil)
			if err != nil {
				return nil, err
			}
			buf = make([]byte, sz+64)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
