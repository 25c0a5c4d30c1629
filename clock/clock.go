package clock

import (
	"fmt"
	"slices"
	"time"
)

// Timespec is a point in time as the kernel's struct timespec64: seconds
// since the Unix epoch (negative before 1970) and nanoseconds 0..999999999.
type Timespec struct {
	Sec  int64 `json:"sec"`
	Nsec int64 `json:"nsec"`
}

// String formats t as seconds with the nanoseconds when they are not zero.
func (t Timespec) String() string {
	if t.Nsec == 0 {
		return fmt.Sprint(t.Sec)
	}
	return fmt.Sprintf("%d.%09d", t.Sec, t.Nsec)
}

// Compare returns -1, 0 or 1 as t is before, equal to or after u.
func (t Timespec) Compare(u Timespec) int {
	switch {
	case t.Sec < u.Sec:
		return -1
	case t.Sec > u.Sec:
		return 1
	case t.Nsec < u.Nsec:
		return -1
	case t.Nsec > u.Nsec:
		return 1
	}
	return 0
}

// Valid reports whether the nanoseconds are in range.
func (t Timespec) Valid() bool { return t.Nsec >= 0 && t.Nsec < 1e9 }

// UTC returns t as a time.Time in UTC.
func (t Timespec) UTC() time.Time { return time.Unix(t.Sec, t.Nsec).UTC() }

// Field is the inode timestamp an op changes.
type Field string

// Inode timestamps.
const (
	Mtime Field = "mtime"
	Ctime Field = "ctime"
	Atime Field = "atime"
)

// Workload ops of a sweep. Each sets one Field from the guest's wall clock,
// except OpUtimensat, which sets atime and mtime to the value explicitly.
const (
	OpCreate    = "create"    // create a file: its mtime
	OpWrite     = "write"     // write one byte to an existing file: mtime
	OpTouch     = "touch"     // utimensat(UTIME_NOW): mtime
	OpUtimensat = "utimensat" // utimensat to the value: mtime (and atime)
	OpMkdir     = "mkdir"     // create a directory: its mtime
	OpRename    = "rename"    // rename a file: its ctime
	OpChmod     = "chmod"     // chmod a file: ctime
	OpRead      = "read"      // read a non-empty file: atime (relatime updates it)
	OpSetxattr  = "setxattr"  // set a user xattr on a file: its ctime
	OpTruncate  = "truncate"  // truncate an existing file up (its size changes): mtime
	OpDirEntry  = "dir-entry" // create a file in an existing directory: the directory's mtime
)

// Ops lists every op, in the default order.
func Ops() []string {
	return []string{OpCreate, OpWrite, OpTouch, OpUtimensat, OpMkdir, OpRename, OpChmod, OpRead, OpSetxattr, OpTruncate, OpDirEntry}
}

// OpField returns the timestamp an op changes; ok is false for an unknown op.
func OpField(op string) (f Field, ok bool) {
	switch op {
	case OpCreate, OpWrite, OpTouch, OpUtimensat, OpMkdir, OpTruncate, OpDirEntry:
		return Mtime, true
	case OpRename, OpChmod, OpSetxattr:
		return Ctime, true
	case OpRead:
		return Atime, true
	}
	return "", false
}

// UsesClock reports whether op takes its time from the guest's wall clock
// (so the sweep sets the clock to the value first).
func UsesClock(op string) bool { return op != OpUtimensat }

// CheckOps returns an error naming the first unknown op, or a duplicate.
func CheckOps(ops []string) error {
	for i, op := range ops {
		if _, ok := OpField(op); !ok {
			return fmt.Errorf("clock: unknown op %q (known: %v)", op, Ops())
		}
		if slices.Contains(ops[:i], op) {
			return fmt.Errorf("clock: op %q given twice", op)
		}
	}
	return nil
}
