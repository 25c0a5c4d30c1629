package crashcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/session"
	"golang.org/x/sys/unix"
)

// maxDurableBytes bounds the file a durability check reads (in the guest
// and from a crash image); readChunk is one agent read.
const (
	maxDurableBytes = 256 << 10
	readChunk       = 32 << 10
)

// durable is what a trace's last op, an fsync or fdatasync of a regular
// file, made durable on one lane: the file's content when it returned, and
// how many flushes the lane's log held then. Every crash state after that
// many flushes must hold the content: at the path after an fsync (Linux's
// filesystems make a file's name durable with it), in the same inode after
// an fdatasync (which promises the data, not a name: a link or rename
// before it may be lost).
//
// After an fsync of a directory, entries are the names it held when the
// fsync returned: every one must be in it in such a crash state.
type durable struct {
	path     string
	ino      uint64
	datasync bool
	content  []byte
	entries  []string // a directory's (nil for a file)
	flushes  int
}

// what says what d is: "a directory", "an empty file" or "a file".
func (d *durable) what() string {
	switch {
	case d.entries != nil:
		return "a directory"
	case len(d.content) == 0:
		return "an empty file"
	}
	return "a file"
}

// maxDurableEntries bounds the names a directory's durability check
// compares.
const maxDurableEntries = 4096

// durableAfter is what the trace's last op made durable on the lane, nil
// when it is not an fsync or fdatasync of a path, or the path is not a
// regular file of at most maxDurableBytes.
func durableAfter(ctx context.Context, run *session.Run, lane string, last *agentv1.Request, flushes int) (*durable, error) {
	path := last.GetFsync().GetPath()
	if path == "" {
		return nil, nil
	}
	if !last.GetFsync().GetDatasync() {
		names, isDir, err := guestEntries(ctx, run, lane, path)
		if err != nil || isDir {
			return &durable{path: path, entries: names, flushes: flushes}, err
		}
	}
	content, ino, err := readGuestFile(ctx, run, lane, path)
	if err != nil || content == nil {
		return nil, err
	}
	return &durable{path: path, ino: ino, datasync: last.GetFsync().GetDatasync(), content: content, flushes: flushes}, nil
}

// guestEntries lists the names in directory path of a lane in the guest,
// sorted, at most maxDurableEntries (isDir false: path is not a
// directory, or holds more).
func guestEntries(ctx context.Context, run *session.Run, lane, path string) (names []string, isDir bool, err error) {
	st, err := run.Call(ctx, "stat "+path, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: path}))
	if err != nil || st.GetErrno() != 0 || st.GetStat().GetKind() != agentv1.Kind_KIND_DIRECTORY {
		return nil, false, err
	}
	resp, err := run.Call(ctx, "list "+path, agent.NewRequest(&agentv1.Fingerprint{Lane: lane, Leaves: true}))
	if err == nil {
		err = unreadable(resp)
	}
	if err != nil {
		return nil, false, err
	}
	names = []string{}
	for _, e := range resp.GetFingerprint().GetLeaves() {
		if dir, name := splitPath(e.GetPath()); dir == path && name != "" {
			names = append(names, name)
		}
	}
	if len(names) > maxDurableEntries {
		return nil, false, nil
	}
	slices.Sort(names)
	return names, true, nil
}

// splitPath is a lane path's directory and name ("" directory: the root).
func splitPath(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// lostEntries says which of d's directory's names got lacks ("" none).
func (d *durable) lostEntries(got []string) string {
	var missing []string
	for _, n := range d.entries {
		if !slices.Contains(got, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("directory %s: %s missing (fsync'd with %d entries)", d.path, strings.Join(missing[:min(8, len(missing))], ", "), len(d.entries))
}

// readGuestFile reads a regular file of at most maxDurableBytes from a
// lane in the guest, with its inode number; nil content (and no error)
// when it is missing, not a regular file, or larger.
func readGuestFile(ctx context.Context, run *session.Run, lane, path string) ([]byte, uint64, error) {
	st, err := run.Call(ctx, "stat "+path, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: path}))
	if err != nil {
		return nil, 0, err
	}
	if st.GetErrno() != 0 || st.GetStat().GetKind() != agentv1.Kind_KIND_REGULAR || st.GetStat().GetSize() > maxDurableBytes {
		return nil, 0, nil
	}
	content := []byte{}
	for off := int64(0); off < st.GetStat().GetSize(); {
		resp, err := run.Call(ctx, "read "+path, agent.NewRequest(&agentv1.ReadFile{Lane: lane, Path: path, Offset: off, Length: readChunk}))
		if err == nil {
			err = unreadable(resp)
		}
		if err != nil {
			return nil, 0, err
		}
		data := resp.GetReadFile().GetData()
		content = append(content, data...)
		off += int64(len(data))
		if len(data) == 0 || resp.GetReadFile().GetEof() {
			break
		}
	}
	return content, st.GetStat().GetIno(), nil
}

// errUnreadable marks an agent's errno reading a lane: on a crash state,
// a finding (the kernel found it corrupt: EUCLEAN, EIO), not a failure.
var errUnreadable = errors.New("unreadable")

// unreadableError is an agent's errno reading a lane (errors.Is
// errUnreadable), with the errno.
type unreadableError struct {
	errno unix.Errno
	msg   string
}

func (e *unreadableError) Error() string        { return errUnreadable.Error() + ": " + e.msg }
func (e *unreadableError) Is(target error) bool { return target == errUnreadable }

// unreadable is resp's errno as an unreadableError (nil: none).
func unreadable(resp *agentv1.Response) error {
	if err := agent.ResponseError(resp); err != nil {
		return &unreadableError{errno: unix.Errno(resp.GetErrno()), msg: err.Error()}
	}
	if fp := resp.GetFingerprint(); fp.GetUnreadable() > 0 {
		return &unreadableError{errno: unix.Errno(fp.GetFirstUnreadableErrno()), msg: fmt.Sprintf("%s: %s (%d entries the filesystem refused to read)",
			fp.GetFirstUnreadable(), oracle.ErrnoText(fp.GetFirstUnreadableErrno()), fp.GetUnreadable())}
	}
	return nil
}

// goneErrnos are what a path that does not resolve gives: a name on the
// way missing, or naming an inode the filesystem refuses as stale (an
// entry whose inode was never written: minix's iget of an inode with no
// links).
var goneErrnos = []unix.Errno{unix.ENOENT, unix.ENOTDIR, unix.ESTALE}

// guestGone reports whether path does not resolve on a lane in the guest.
func guestGone(ctx context.Context, run *session.Run, lane, path string) (bool, error) {
	st, err := run.Call(ctx, "stat "+path, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: path}))
	if err != nil {
		return false, err
	}
	return slices.Contains(goneErrnos, unix.Errno(st.GetErrno())), nil
}

// staleEntry reports whether err is a directory's entry naming an inode
// the filesystem refuses as stale.
func staleEntry(err error) bool {
	var u *unreadableError
	return errors.As(err, &u) && u.errno == unix.ESTALE
}

// lostIn says what a crash state's copy of d's file lost against what was
// made durable ("" when nothing): got is the file as read (nil: missing).
func (d *durable) lostIn(got []byte) string {
	what := d.path
	if d.datasync {
		what = fmt.Sprintf("%s (inode %d, fdatasync'd)", d.path, d.ino)
	}
	switch {
	case got == nil:
		return what + ": missing"
	case bytes.Equal(got, d.content):
		return ""
	case len(got) != len(d.content):
		return fmt.Sprintf("%s: %d bytes, fsync'd with %d", what, len(got), len(d.content))
	}
	i := 0
	for got[i] == d.content[i] {
		i++
	}
	return fmt.Sprintf("%s: byte %d is %#02x, fsync'd as %#02x", what, i, got[i], d.content[i])
}

// checkDurable reads d's file from the ext* image img (by path after an
// fsync, by inode after an fdatasync) and says whether it holds d.content:
// "" when it does, else what is lost.
func checkDurable(img string, d *durable) (string, error) {
	f, err := os.Open(img)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	fs, err := fsimage.Open(f, st.Size())
	if err != nil {
		return fmt.Sprintf("%s: the image does not open (%v)", d.path, err), nil
	}
	if d.entries != nil {
		var got []string
		for _, n := range d.entries {
			if _, err := fs.Lookup("/" + strings.TrimPrefix(d.path+"/"+n, "/")); err == nil {
				got = append(got, n)
			}
		}
		return d.lostEntries(got), nil
	}
	ino := uint32(d.ino)
	if d.datasync && uint64(ino) != d.ino {
		return fmt.Sprintf("%s: inode %d is not an ext inode number", d.path, d.ino), nil
	}
	if !d.datasync {
		if ino, err = fs.Lookup("/" + strings.TrimPrefix(d.path, "/")); err != nil {
			return fmt.Sprintf("%s: missing (%v)", d.path, err), nil
		}
	}
	got, err := fs.ReadFile(ino, maxDurableBytes)
	if err != nil {
		return fmt.Sprintf("%s: unreadable (%v)", d.path, err), nil
	}
	return d.lostIn(got), nil
}
