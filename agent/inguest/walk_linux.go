package inguest

import (
	"errors"
	"fmt"
	"path"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Bounds of a Walk: the defaults and the most a request may ask for.
const (
	maxWalkEntries = 1 << 16
	maxWalkDepth   = 64
)

// walkBound returns v, or limit when v is 0; more than limit is EINVAL.
func walkBound(v, limit uint32, field string) (int, error) {
	if v > limit {
		return 0, errorf(unix.EINVAL, "%s %d: at most %d", field, v, limit)
	}
	if v == 0 {
		return int(limit), nil
	}
	return int(v), nil
}

// walkDir implements Walk for the lane path p (its *at name is at) under
// the lane's directory fd dir: lstat of p, then, when p is a directory, its
// entries (ls), and with o.recursive every directory below (find). It reads
// no file contents and no symlink targets.
func walkDir(dir int, p, at string, o *agentv1.Walk) (*agentv1.WalkResult, error) {
	maxEntries, err := walkBound(o.GetMaxEntries(), maxWalkEntries, "max_entries")
	if err != nil {
		return nil, err
	}
	maxDepth, err := walkBound(o.GetMaxDepth(), maxWalkDepth, "max_depth")
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, at, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	res := &agentv1.WalkResult{}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return res, nil // ls -l FILE and find FILE stat it and stop
	}
	fd, err := openNoatime(dir, at, unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	w := &lister{buf: make([]byte, 64<<10), res: res, maxEntries: maxEntries, maxDepth: maxDepth, recursive: o.GetRecursive()}
	err = w.dir(fd, p, 0)
	if cerr := unix.Close(fd); cerr != nil && err == nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// lister is one Walk in progress.
type lister struct {
	buf        []byte // getdents buffer
	res        *agentv1.WalkResult
	maxEntries int
	maxDepth   int
	recursive  bool
}

// dir reads the open directory fd (lane path prefix, depth below the walk's
// start) whole, lstats each entry, then descends into the subdirectories,
// in directory order, as find does.
func (w *lister) dir(fd int, prefix string, depth int) error {
	w.res.Directories++
	w.res.Depth = max(w.res.Depth, uint32(depth))
	names, err := w.names(fd, prefix)
	if err != nil {
		return err
	}
	var subdirs []string
	for _, name := range names {
		if int(w.res.Entries) >= w.maxEntries {
			return errorf(unix.E2BIG, "%s: more than %d entries", displayPath(prefix), w.maxEntries)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: stat: %w", path.Join(prefix, name), err)
		}
		w.res.Entries++
		if w.recursive && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			subdirs = append(subdirs, name)
		}
	}
	for _, name := range subdirs {
		p := path.Join(prefix, name)
		if depth+1 > w.maxDepth {
			return errorf(unix.ELOOP, "%s: deeper than %d levels", p, w.maxDepth)
		}
		sub, err := openNoatime(fd, name, unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("%s: open: %w", p, err)
		}
		err = w.dir(sub, p, depth+1)
		if cerr := unix.Close(sub); cerr != nil && err == nil {
			err = fmt.Errorf("%s: close: %w", p, cerr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// names lists a directory without "." and "..", in the order getdents
// returns them; a directory with more names than the walk may still stat
// is E2BIG before it is listed whole.
func (w *lister) names(fd int, prefix string) ([]string, error) {
	var names []string
	for {
		n, err := unix.Getdents(fd, w.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: read directory: %w", displayPath(prefix), err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(w.buf[:n], -1, names)
		if len(names) > w.maxEntries-int(w.res.Entries) {
			return nil, errorf(unix.E2BIG, "%s: more than %d entries", displayPath(prefix), w.maxEntries)
		}
	}
}
