package scratch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// OwnerFile is the lock file inside an owned dir.
const OwnerFile = ".owner"

// Lock is an exclusive flock held on a file.
type Lock struct {
	f *os.File
}

// LockFile takes an exclusive flock on the existing file at path, without
// waiting: a file another process holds is an error wrapping
// unix.EWOULDBLOCK.
func LockFile(path string) (*Lock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scratch: lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		cerr := f.Close()
		return nil, errors.Join(fmt.Errorf("scratch: lock %s: %w", path, err), cerr)
	}
	return &Lock{f: f}, nil
}

// Close releases the lock. It is idempotent.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	if err != nil {
		return fmt.Errorf("scratch: unlock: %w", err)
	}
	return nil
}

// Dir is a scratch dir its owner holds (its OwnerFile locked).
type Dir struct {
	// Path is the dir's path.
	Path string
	lock *Lock
}

// StagingPrefix starts the name an entry has while it is made: MkdirTemp
// and CreateFile make it under StagingPrefix+name, lock it, and only then
// rename it to its name. So an entry under its name with a free lock is a
// leftover, whatever its age; one under a staging name may be an instant
// from being locked, and Sweep waits for its grace.
const StagingPrefix = ".new-"

// MkdirTemp creates a new dir in parent (os.MkdirTemp's pattern, mode
// 0700) and takes its ownership before the dir has its name. Remove
// deletes it.
func MkdirTemp(parent, pattern string) (*Dir, error) {
	staging, err := os.MkdirTemp(parent, StagingPrefix+pattern)
	if err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}
	owner := filepath.Join(staging, OwnerFile)
	f, err := os.OpenFile(owner, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = f.Close()
	}
	var l *Lock
	if err == nil {
		l, err = LockFile(owner)
	}
	dir := ""
	if err == nil {
		dir, err = publish(staging)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("scratch: own %s: %w", staging, err), os.RemoveAll(staging), l.Close())
	}
	return &Dir{Path: dir, lock: l}, nil
}

// CreateFile creates the file path (O_EXCL, mode 0600), open for reading
// and writing, and takes its lock before the file has its name. The
// caller closes f and, once the file is removed, lock.
func CreateFile(path string) (f *os.File, lock *Lock, err error) {
	staging := filepath.Join(filepath.Dir(path), StagingPrefix+filepath.Base(path))
	f, err = os.OpenFile(staging, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("scratch: %w", err)
	}
	lock, err = LockFile(staging)
	if err == nil {
		_, err = publish(staging)
	}
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("scratch: own %s: %w", path, err), f.Close(), os.Remove(staging), lock.Close())
	}
	return f, lock, nil
}

// publish renames a locked staging entry to its name (without
// StagingPrefix), never over an entry that has it, and returns the name.
func publish(staging string) (string, error) {
	name := filepath.Join(filepath.Dir(staging), strings.TrimPrefix(filepath.Base(staging), StagingPrefix))
	err := unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A file system without RENAME_NOREPLACE: the name is random, so
		// a check before a plain rename is enough.
		if _, err = os.Lstat(name); err == nil {
			err = fs.ErrExist
		} else if errors.Is(err, fs.ErrNotExist) {
			err = os.Rename(staging, name)
		}
	}
	if err != nil {
		return "", fmt.Errorf("publish %s: %w", name, err)
	}
	return name, nil
}

// Remove deletes the dir and everything in it, then lets go of it. It is
// idempotent.
func (d *Dir) Remove() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := os.RemoveAll(d.Path)
	if err != nil {
		err = fmt.Errorf("scratch: remove %s: %w", d.Path, err)
	}
	err = errors.Join(err, d.lock.Close())
	d.lock = nil
	return err
}

// Sweep removes, in dir, the entries a process that is gone left: regular
// files whose names start with filePrefix and dirs whose names start with
// one of dirPrefixes holding an OwnerFile, each only when nobody holds its lock,
// at once (it was locked before it had its name: a free lock means its
// owner is gone), and the same under a staging name (StagingPrefix) once
// it was last modified more than grace ago (its owner may be about to lock
// it). It logs each removal and returns the paths removed; entries it
// cannot inspect are skipped (logged at debug), a failed removal is
// returned.
func Sweep(dir, filePrefix string, grace time.Duration, log *zap.Logger, dirPrefixes ...string) ([]string, error) {
	if log == nil {
		log = zap.NewNop()
	}
	entries, err := sweepEntries(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		name, staging := strings.CutPrefix(e.Name(), StagingPrefix)
		var lockPath string
		switch {
		case e.Type().IsRegular() && strings.HasPrefix(name, filePrefix):
			lockPath = p
		case e.IsDir() && hasPrefix(name, dirPrefixes):
			lockPath = filepath.Join(p, OwnerFile)
		default:
			continue
		}
		wait := time.Duration(0)
		if staging {
			wait = grace
		}
		ok, err := sweepOne(p, lockPath, wait, log)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// sweepOne removes p (a file, or a dir with everything in it) when the
// lock file lockPath is free and p is older than grace.
func sweepOne(p, lockPath string, grace time.Duration, log *zap.Logger) (bool, error) {
	fi, err := os.Lstat(p)
	if err != nil || time.Since(fi.ModTime()) < grace {
		return false, nil
	}
	l, err := LockFile(lockPath)
	if err != nil {
		// Held by a live process, not ours to read, or not an owned dir.
		log.Debug("sweep: kept", zap.String("path", p), zap.Error(err))
		return false, nil
	}
	rerr := os.RemoveAll(p)
	if err := errors.Join(rerr, l.Close()); err != nil {
		return false, fmt.Errorf("scratch: sweep %s: %w", p, err)
	}
	log.Info("swept a leftover of a process that is gone", zap.String("path", p), zap.Time("modified", fi.ModTime()))
	return true, nil
}

// SweepAged removes, in dir, the entries whose names start with one of
// prefixes and that were last modified more than age ago, for temporaries
// that carry no lock. It logs each removal and returns the paths removed.
func SweepAged(dir string, prefixes []string, age time.Duration, log *zap.Logger) ([]string, error) {
	if log == nil {
		log = zap.NewNop()
	}
	entries, err := sweepEntries(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !hasPrefix(e.Name(), prefixes) || !(e.Type().IsRegular() || e.IsDir()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil || time.Since(fi.ModTime()) < age {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("scratch: sweep %s: %w", p, err))
			continue
		}
		log.Info("swept a stale temporary", zap.String("path", p), zap.Time("modified", fi.ModTime()))
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}

func hasPrefix(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// sweepEntries lists dir for a sweep; a dir that does not exist has none.
func sweepEntries(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("scratch: sweep %s: %w", dir, err)
	}
	return entries, nil
}
