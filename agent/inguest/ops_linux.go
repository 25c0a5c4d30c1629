package inguest

import (
	"errors"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Sizes of data the agent moves in one request.
const (
	maxWriteSize = 64 << 20 // Write.size
	maxReadSize  = 1 << 20  // ReadFile.length
	ioChunk      = 1 << 20  // one pwrite of fill
)

// handle dispatches req; the result and errno go into resp.
func (s *Server) handle(req *agentv1.Request, resp *agentv1.Response) {
	switch op := req.GetOp().(type) {
	case *agentv1.Request_Ping:
		s.ping(resp)
	case *agentv1.Request_Create:
		o := op.Create
		s.onLane(resp, "create", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			fd, err := unix.Openat(dir, p, int(o.GetFlags())|unix.O_CREAT|unix.O_CLOEXEC, o.GetMode())
			if err != nil {
				return err
			}
			return unix.Close(fd)
		})
	case *agentv1.Request_Write:
		o := op.Write
		s.onLane(resp, "write", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			n, err := s.write(dir, p, o)
			resp.Ret = n
			return err
		})
	case *agentv1.Request_Truncate:
		o := op.Truncate
		s.onLane(resp, "truncate", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			// truncate(2) has no *at form; the lane path is validated.
			return unix.Truncate(filepath.Join(s.lanePath(o.GetLane()), p), o.GetLength())
		})
	case *agentv1.Request_Unlink:
		o := op.Unlink
		s.onLane(resp, "unlink", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return unix.Unlinkat(dir, p, 0)
		})
	case *agentv1.Request_Mkdir:
		o := op.Mkdir
		s.onLane(resp, "mkdir", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return unix.Mkdirat(dir, p, o.GetMode())
		})
	case *agentv1.Request_Rmdir:
		o := op.Rmdir
		s.onLane(resp, "rmdir", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return unix.Unlinkat(dir, p, unix.AT_REMOVEDIR)
		})
	case *agentv1.Request_Chmod:
		o := op.Chmod
		s.onLane(resp, "chmod", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return unix.Fchmodat(dir, p, o.GetMode(), 0)
		})
	case *agentv1.Request_Chown:
		o := op.Chown
		s.onLane(resp, "chown", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			uid, err := ownerID(o.GetUid())
			if err != nil {
				return err
			}
			gid, err := ownerID(o.GetGid())
			if err != nil {
				return err
			}
			return unix.Fchownat(dir, p, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		})
	case *agentv1.Request_Setxattr:
		o := op.Setxattr
		s.onLane(resp, "setxattr", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return unix.Lsetxattr(filepath.Join(s.lanePath(o.GetLane()), p), o.GetName(), o.GetValue(), int(o.GetFlags()))
		})
	case *agentv1.Request_Removexattr:
		o := op.Removexattr
		s.onLane(resp, "removexattr", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return unix.Lremovexattr(filepath.Join(s.lanePath(o.GetLane()), p), o.GetName())
		})
	case *agentv1.Request_Rename:
		o := op.Rename
		s.onLane2(resp, "rename", o.GetLane(), o.GetPath(), o.GetNewPath(), func(dir int, p, np string) error {
			return unix.Renameat2(dir, p, dir, np, uint(o.GetFlags()))
		})
	case *agentv1.Request_Link:
		o := op.Link
		s.onLane2(resp, "link", o.GetLane(), o.GetPath(), o.GetNewPath(), func(dir int, p, np string) error {
			return unix.Linkat(dir, p, dir, np, 0)
		})
	case *agentv1.Request_Symlink:
		o := op.Symlink
		s.onLane(resp, "symlink", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return unix.Symlinkat(o.GetTarget(), dir, p)
		})
	case *agentv1.Request_Utimens:
		o := op.Utimens
		s.onLane(resp, "utimens", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			flags := 0
			if o.GetNofollow() {
				flags = unix.AT_SYMLINK_NOFOLLOW
			}
			ts := []unix.Timespec{timeValue(o.GetAtime()), timeValue(o.GetMtime())}
			return unix.UtimesNanoAt(dir, p, ts, flags)
		})
	case *agentv1.Request_Fsync:
		o := op.Fsync
		s.onLane(resp, "fsync", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			return fsync(dir, o.GetPath(), o.GetDatasync())
		})
	case *agentv1.Request_Stat:
		o := op.Stat
		s.onLane(resp, "stat", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			flags := unix.AT_SYMLINK_NOFOLLOW
			if o.GetFollow() {
				flags = 0
			}
			var st unix.Stat_t
			if err := unix.Fstatat(dir, p, &st, flags); err != nil {
				return err
			}
			resp.Result = &agentv1.Response_Stat{Stat: statResult(&st)}
			return nil
		})
	case *agentv1.Request_Readlink:
		o := op.Readlink
		s.onLane(resp, "readlink", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			target, err := readlinkat(dir, p)
			if err != nil {
				return err
			}
			resp.Result = &agentv1.Response_Readlink{Readlink: &agentv1.ReadlinkResult{Target: target}}
			return nil
		})
	case *agentv1.Request_ReadFile:
		o := op.ReadFile
		s.onLane(resp, "read", o.GetLane(), o.GetPath(), func(dir int, p string) error {
			res, err := readFile(dir, p, o.GetOffset(), o.GetLength())
			if err != nil {
				return err
			}
			resp.Ret = int64(len(res.Data))
			resp.Result = &agentv1.Response_ReadFile{ReadFile: res}
			return nil
		})
	case *agentv1.Request_Fingerprint:
		o := op.Fingerprint
		if o.GetBelow() || o.GetLower() {
			walk, what := s.fingerprintBelow, "fingerprint below"
			switch {
			case o.GetBelow() && o.GetLower():
				fail(resp, "fingerprint", "", errorf(unix.EINVAL, "below and lower are different walks: ask for one"))
				return
			case o.GetLower():
				walk, what = s.fingerprintLower, "fingerprint lower layer"
			}
			res, err := walk(o)
			if err != nil {
				fail(resp, what, "", err)
				return
			}
			resp.Ret = int64(res.Entries)
			resp.Result = &agentv1.Response_Fingerprint{Fingerprint: res}
			return
		}
		s.onLane(resp, "fingerprint", o.GetLane(), "", func(dir int, _ string) error {
			res, err := fingerprint(dir, o.GetTimeMode(), o.GetLeaves())
			if err != nil {
				return err
			}
			resp.Ret = int64(res.Entries)
			resp.Result = &agentv1.Response_Fingerprint{Fingerprint: res}
			return nil
		})
	case *agentv1.Request_Walk:
		o := op.Walk
		s.onLane(resp, "walk", o.GetLane(), o.GetPath(), func(dir int, at string) error {
			res, err := walkDir(dir, o.GetPath(), at, o)
			if err != nil {
				return err
			}
			resp.Ret = int64(res.Entries)
			resp.Result = &agentv1.Response_Walk{Walk: res}
			return nil
		})
	case *agentv1.Request_Sync:
		unix.Sync()
	case *agentv1.Request_GetClock:
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &ts); err != nil {
			fail(resp, "clock_gettime", "", err)
			return
		}
		resp.Result = &agentv1.Response_Clock{Clock: &agentv1.Timespec{Sec: ts.Sec, Nsec: ts.Nsec}}
	case *agentv1.Request_Kmsg:
		lines, err := readKmsg("/dev/kmsg", op.Kmsg.GetAfterSeq(), maxKmsgLines)
		if err != nil {
			fail(resp, "kmsg", "", err)
			return
		}
		resp.Result = &agentv1.Response_Kmsg{Kmsg: &agentv1.KmsgResult{Lines: lines}}
	case *agentv1.Request_DropCaches:
		s.machineOp(resp, "drop_caches", func() error { return dropCaches(op.DropCaches.GetLevel()) })
	case *agentv1.Request_Writeback:
		s.machineOp(resp, "writeback", func() error { return setWriteback(op.Writeback.GetPeriodic()) })
	case *agentv1.Request_SetClock:
		s.machineOp(resp, "set_clock", func() error {
			t := op.SetClock.GetTime()
			ts := unix.Timespec{Sec: t.GetSec(), Nsec: t.GetNsec()}
			return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
		})
	case *agentv1.Request_Mount:
		s.machineOp(resp, "mount "+op.Mount.GetLane(), func() error { return s.mount(op.Mount) })
	case *agentv1.Request_Umount:
		s.machineOp(resp, "umount "+op.Umount.GetLane(), func() error { return s.umount(op.Umount.GetLane()) })
	case *agentv1.Request_Exec:
		s.machineOp(resp, "exec "+op.Exec.GetPath(), func() error {
			res, err := s.exec(op.Exec)
			if res != nil {
				resp.Result = &agentv1.Response_Exec{Exec: res}
			}
			return err
		})
	case nil:
		fail(resp, "request", "", errorf(unix.EINVAL, "no operation"))
	default:
		fail(resp, "request", "", errorf(unix.EINVAL, "unknown operation %T", op))
	}
}

// machineOp runs f if the server may act on the whole machine.
func (s *Server) machineOp(resp *agentv1.Response, op string, f func() error) {
	if !s.Machine {
		fail(resp, op, "", errorf(unix.EPERM, "not allowed: the agent does not own this machine"))
		return
	}
	if err := f(); err != nil {
		fail(resp, op, "", err)
	}
}

func (s *Server) lanePath(lane string) string { return filepath.Join(s.Root, lane) }

// openLane opens the lane's directory.
func (s *Server) openLane(lane string) (int, error) {
	if err := checkLane(lane); err != nil {
		return -1, err
	}
	s.mu.Lock()
	st := s.lanes[lane]
	unmounted := st != nil && !st.mounted
	s.mu.Unlock()
	if unmounted {
		return -1, errorf(unix.ENOENT, "lane %q is not mounted", lane)
	}
	fd, err := unix.Open(s.lanePath(lane), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return -1, errorf(unix.ENOENT, "no such lane %q", lane)
	}
	if err != nil {
		return -1, fmt.Errorf("open lane %q: %w", lane, err)
	}
	return fd, nil
}

// onLane validates lane and p, opens the lane and runs f with the lane's
// directory fd and the *at name for p.
func (s *Server) onLane(resp *agentv1.Response, op, lane, p string, f func(dir int, p string) error) {
	if err := checkLane(lane); err != nil {
		fail(resp, op, p, err)
		return
	}
	if err := checkPath(p); err != nil {
		fail(resp, op, "", err)
		return
	}
	dir, err := s.openLane(lane)
	if err != nil {
		fail(resp, op, p, err)
		return
	}
	defer s.closeFd(dir, "lane "+lane)
	if err := f(dir, atPath(p)); err != nil {
		fail(resp, op, p, err)
	}
}

// onLane2 is onLane for operations on two paths.
func (s *Server) onLane2(resp *agentv1.Response, op, lane, p, np string, f func(dir int, p, np string) error) {
	if err := checkPath(np); err != nil {
		fail(resp, op, "", err)
		return
	}
	s.onLane(resp, op, lane, p, func(dir int, p string) error {
		if err := f(dir, p, atPath(np)); err != nil {
			return fmt.Errorf("-> %s: %w", np, err)
		}
		return nil
	})
}

// closeFd closes a descriptor whose close error cannot change the result
// (a directory or a file only read); the error is logged.
func (s *Server) closeFd(fd int, what string) {
	if err := unix.Close(fd); err != nil {
		s.log().Warn("agent: close", zap.String("what", what), zap.Error(err))
	}
}

// ownerID converts a Chown id: -1 leaves it unchanged, else 0..2^32-2.
func ownerID(v int64) (int, error) {
	if v < -1 || v >= 1<<32-1 {
		return 0, errorf(unix.EINVAL, "bad owner id %d", v)
	}
	return int(v), nil
}

// timeValue converts a utimensat argument.
func timeValue(v *agentv1.TimeValue) unix.Timespec {
	switch v.GetKind() {
	case agentv1.TimeValue_KIND_SET:
		return unix.Timespec{Sec: v.GetTime().GetSec(), Nsec: v.GetTime().GetNsec()}
	case agentv1.TimeValue_KIND_NOW:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	default:
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
}

// write implements Write and returns the number of bytes written, also when
// it fails part way.
func (s *Server) write(dir int, p string, o *agentv1.Write) (written int64, err error) {
	flags := int(o.GetFlags())
	if flags&unix.O_ACCMODE == unix.O_RDONLY {
		flags |= unix.O_WRONLY
	}
	data := o.GetData()
	total := int64(len(data))
	if total == 0 {
		total = o.GetSize()
		if total < 0 || total > maxWriteSize {
			return 0, errorf(unix.EINVAL, "write size %d out of range 0..%d", total, maxWriteSize)
		}
	}
	if o.GetOffset() < 0 {
		return 0, errorf(unix.EINVAL, "negative offset %d", o.GetOffset())
	}
	fd, err := unix.Openat(dir, p, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := unix.Close(fd); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	if total == 0 {
		return 0, nil
	}
	// A page-aligned buffer, so that O_DIRECT writes work.
	buf, err := unix.Mmap(-1, 0, int(min(total, ioChunk)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, fmt.Errorf("mmap buffer: %w", err)
	}
	defer func() {
		if merr := unix.Munmap(buf); merr != nil {
			s.log().Warn("agent: munmap write buffer", zap.Error(merr))
		}
	}()
	if len(data) == 0 {
		fill := byte(o.GetFill())
		for i := range buf {
			buf[i] = fill
		}
	}
	for written < total {
		k := int(min(total-written, int64(len(buf))))
		if len(data) > 0 {
			copy(buf, data[written:written+int64(k)])
		}
		chunk := buf[:k]
		for len(chunk) > 0 {
			n, err := unix.Pwrite(fd, chunk, o.GetOffset()+written)
			if err != nil {
				return written, err
			}
			if n == 0 {
				return written, errorf(unix.EIO, "pwrite wrote nothing")
			}
			written += int64(n)
			chunk = chunk[n:]
		}
	}
	return written, nil
}

// fsync implements Fsync: syncfs for the lane root, else fsync of path p
// (not the *at name: an empty path means the whole lane).
func fsync(dir int, p string, datasync bool) error {
	if p == "" {
		return unix.Syncfs(dir)
	}
	fd, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if datasync {
		err = unix.Fdatasync(fd)
	} else {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); cerr != nil && err == nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return err
}

// kindOf maps st_mode's type bits to a Kind.
func kindOf(mode uint32) agentv1.Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return agentv1.Kind_KIND_REGULAR
	case unix.S_IFDIR:
		return agentv1.Kind_KIND_DIRECTORY
	case unix.S_IFLNK:
		return agentv1.Kind_KIND_SYMLINK
	case unix.S_IFCHR:
		return agentv1.Kind_KIND_CHAR_DEVICE
	case unix.S_IFBLK:
		return agentv1.Kind_KIND_BLOCK_DEVICE
	case unix.S_IFIFO:
		return agentv1.Kind_KIND_FIFO
	case unix.S_IFSOCK:
		return agentv1.Kind_KIND_SOCKET
	}
	return agentv1.Kind_KIND_UNSPECIFIED
}

func timespec(ts unix.Timespec) *agentv1.Timespec {
	return &agentv1.Timespec{Sec: ts.Sec, Nsec: ts.Nsec}
}

func statResult(st *unix.Stat_t) *agentv1.StatResult {
	return &agentv1.StatResult{
		Kind:   kindOf(st.Mode),
		Mode:   st.Mode & 0o7777,
		Uid:    st.Uid,
		Gid:    st.Gid,
		Nlink:  uint64(st.Nlink),
		Size:   st.Size,
		Ino:    st.Ino,
		Blocks: st.Blocks,
		Rdev:   st.Rdev,
		Atime:  timespec(st.Atim),
		Mtime:  timespec(st.Mtim),
		Ctime:  timespec(st.Ctim),
	}
}

// readlinkat returns the target of the symlink p.
func readlinkat(dir int, p string) (string, error) {
	for size := 4096 + 1; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, p, buf)
		if err != nil {
			return "", err
		}
		if n < size || size >= 1<<20 {
			return string(buf[:n]), nil
		}
	}
}

// readFile implements ReadFile.
func readFile(dir int, p string, off, length int64) (*agentv1.ReadFileResult, error) {
	if off < 0 || length < 0 {
		return nil, errorf(unix.EINVAL, "negative offset %d or length %d", off, length)
	}
	length = min(length, maxReadSize)
	fd, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	res, err := preadAll(fd, off, length)
	if cerr := unix.Close(fd); cerr != nil && err == nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return res, err
}

func preadAll(fd int, off, length int64) (*agentv1.ReadFileResult, error) {
	buf := make([]byte, length)
	n, err := preadFull(fd, buf, off)
	if err != nil {
		return nil, err
	}
	eof := n < len(buf)
	if !eof {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, err
		}
		eof = st.Mode&unix.S_IFMT == unix.S_IFREG && off+int64(n) >= st.Size
	}
	return &agentv1.ReadFileResult{Data: buf[:n], Eof: eof}, nil
}
