package inguest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func TestLaneOpsErrno(t *testing.T) {
	long := strings.Repeat("x", 256)
	tests := []struct {
		name string
		req  *agentv1.Request
		want syscall.Errno
	}{
		{"mkdir new", mkdir("n"), 0},
		{"mkdir existing", mkdir("d"), unix.EEXIST},
		{"mkdir missing parent", mkdir("x/y"), unix.ENOENT},
		{"mkdir under file", mkdir("d/f/x"), unix.ENOTDIR},
		{"mkdir root", mkdir(""), unix.EEXIST},
		{"rmdir non-empty", rmdir("d"), unix.ENOTEMPTY},
		{"rmdir empty", rmdir("e"), 0},
		{"rmdir file", rmdir("d/f"), unix.ENOTDIR},
		{"rmdir missing", rmdir("x"), unix.ENOENT},
		{"unlink missing", unlink("x"), unix.ENOENT},
		{"unlink file", unlink("d/f"), 0},
		{"unlink dir", unlink("d"), unix.EISDIR},
		{"unlink symlink", unlink("s"), 0},
		{"create new", create("d/g"), 0},
		{"create existing", create("d/f"), 0},
		{"create excl existing", &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Lane: lane, Path: "d/f", Flags: unix.O_EXCL, Mode: 0o644}}}, unix.EEXIST},
		{"create under file", create("d/f/g"), unix.ENOTDIR},
		{"stat missing", stat("nope", false), unix.ENOENT},
		{"dotdot", mkdir("../x"), unix.EINVAL},
		{"absolute", mkdir("/abs"), unix.EINVAL},
		{"escape", mkdir("a/../../b"), unix.EINVAL},
		{"unclean", mkdir("a/../b"), unix.EINVAL},
		{"dot", mkdir("."), unix.EINVAL},
		{"dot component", mkdir("a/./b"), unix.EINVAL},
		{"double slash", mkdir("a//b"), unix.EINVAL},
		{"trailing slash", mkdir("a/"), unix.EINVAL},
		{"nul", mkdir("a\x00b"), unix.EINVAL},
		{"long component", mkdir(long), unix.ENAMETOOLONG},
		{"long path", mkdir(strings.Repeat("a/", 2049)), unix.ENAMETOOLONG},
		{"no lane", &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: "other", Path: "x"}}}, unix.ENOENT},
		{"empty lane", &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "x"}}}, unix.EINVAL},
		{"lane dotdot", &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: "..", Path: "x"}}}, unix.EINVAL},
		{"lane slash", &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: "a/b", Path: "x"}}}, unix.EINVAL},
		{"lane long", &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: strings.Repeat("l", 65), Path: "x"}}}, unix.EINVAL},
		{"rename", &agentv1.Request{Op: &agentv1.Request_Rename{Rename: &agentv1.Rename{Lane: lane, Path: "d/f", NewPath: "g"}}}, 0},
		{"rename noreplace", &agentv1.Request{Op: &agentv1.Request_Rename{Rename: &agentv1.Rename{Lane: lane, Path: "d/f", NewPath: "s", Flags: unix.RENAME_NOREPLACE}}}, unix.EEXIST},
		{"rename dir onto non-empty", &agentv1.Request{Op: &agentv1.Request_Rename{Rename: &agentv1.Rename{Lane: lane, Path: "e", NewPath: "d"}}}, unix.ENOTEMPTY},
		{"rename bad new path", &agentv1.Request{Op: &agentv1.Request_Rename{Rename: &agentv1.Rename{Lane: lane, Path: "d/f", NewPath: "../g"}}}, unix.EINVAL},
		{"link", &agentv1.Request{Op: &agentv1.Request_Link{Link: &agentv1.Link{Lane: lane, Path: "d/f", NewPath: "h"}}}, 0},
		{"link dir", &agentv1.Request{Op: &agentv1.Request_Link{Link: &agentv1.Link{Lane: lane, Path: "d", NewPath: "h"}}}, unix.EPERM},
		{"link existing", &agentv1.Request{Op: &agentv1.Request_Link{Link: &agentv1.Link{Lane: lane, Path: "d/f", NewPath: "s"}}}, unix.EEXIST},
		{"symlink", &agentv1.Request{Op: &agentv1.Request_Symlink{Symlink: &agentv1.Symlink{Lane: lane, Target: "/etc/passwd", Path: "t"}}}, 0},
		{"symlink existing", &agentv1.Request{Op: &agentv1.Request_Symlink{Symlink: &agentv1.Symlink{Lane: lane, Target: "x", Path: "d"}}}, unix.EEXIST},
		{"truncate dir", &agentv1.Request{Op: &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Lane: lane, Path: "d", Length: 1}}}, unix.EISDIR},
		{"truncate negative", &agentv1.Request{Op: &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Lane: lane, Path: "d/f", Length: -1}}}, unix.EINVAL},
		{"chmod missing", &agentv1.Request{Op: &agentv1.Request_Chmod{Chmod: &agentv1.Chmod{Lane: lane, Path: "x", Mode: 0o600}}}, unix.ENOENT},
		{"chown bad id", &agentv1.Request{Op: &agentv1.Request_Chown{Chown: &agentv1.Chown{Lane: lane, Path: "d/f", Uid: -2, Gid: -1}}}, unix.EINVAL},
		{"write dir", write("d", 0, 0, []byte("x"), 0, 0), unix.EISDIR},
		{"write missing", write("x", 0, 0, []byte("x"), 0, 0), unix.ENOENT},
		{"write too big", write("d/f", 0, 0, nil, maxWriteSize+1, 0), unix.EINVAL},
		{"write negative offset", write("d/f", 0, -1, []byte("x"), 0, 0), unix.EINVAL},
		{"read dir", readReq("d", 0, 10), unix.EISDIR},
		{"readlink file", &agentv1.Request{Op: &agentv1.Request_Readlink{Readlink: &agentv1.Readlink{Lane: lane, Path: "d/f"}}}, unix.EINVAL},
		{"fsync missing", &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Lane: lane, Path: "x"}}}, unix.ENOENT},
		{"fsync file", &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Lane: lane, Path: "d/f", Datasync: true}}}, 0},
		{"syncfs lane", &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Lane: lane}}}, 0},
		{"removexattr missing", &agentv1.Request{Op: &agentv1.Request_Removexattr{Removexattr: &agentv1.Removexattr{Lane: lane, Path: "x", Name: "user.a"}}}, unix.ENOENT},
		{"no op", &agentv1.Request{Id: 5}, unix.EINVAL},
		{"set clock refused", &agentv1.Request{Op: &agentv1.Request_SetClock{SetClock: &agentv1.SetClock{}}}, unix.EPERM},
		{"mount refused", &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane, Device: "/dev/null", Fstype: "ext2"}}}, unix.EPERM},
		{"umount refused", &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: lane}}}, unix.EPERM},
		{"drop caches refused", &agentv1.Request{Op: &agentv1.Request_DropCaches{DropCaches: &agentv1.DropCaches{Level: 3}}}, unix.EPERM},
		{"exec refused", &agentv1.Request{Op: &agentv1.Request_Exec{Exec: &agentv1.Exec{Path: "/bin/true"}}}, unix.EPERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, dir := newServer(t)
			setup(t, dir)
			tt.req.Id = 42
			resp := s.Handle(tt.req)
			if got := errnoOf(resp); got != tt.want {
				t.Fatalf("errno = %v (%q), want %v", got, resp.GetError(), tt.want)
			}
			if resp.GetId() != 42 {
				t.Errorf("id = %d, want 42", resp.GetId())
			}
			if (resp.GetError() == "") != (tt.want == 0) {
				t.Errorf("error text %q with errno %v", resp.GetError(), tt.want)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	resp := s.Handle(unlink("d-00/f-00"))
	if want := "unlink d-00/f-00: no such file or directory"; resp.GetError() != want {
		t.Errorf("error = %q, want %q", resp.GetError(), want)
	}
	if err := agent.ResponseError(resp); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("ResponseError = %v, want ENOENT", err)
	}
	if err := agent.ResponseError(&agentv1.Response{}); err != nil {
		t.Errorf("ResponseError(success) = %v", err)
	}
}

func TestWriteRead(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	must(t, s, create("f"))
	// Fill across several chunks, then data over the middle.
	const size = 2*ioChunk + 100
	if r := must(t, s, write("f", 0, 0, nil, size, 0x1ab)); r.GetRet() != size {
		t.Fatalf("ret = %d, want %d", r.GetRet(), size)
	}
	if r := must(t, s, write("f", unix.O_RDWR, 10, []byte("hello"), 0, 0)); r.GetRet() != 5 {
		t.Fatalf("ret = %d, want 5", r.GetRet())
	}
	want := bytes.Repeat([]byte{0xab}, size)
	copy(want[10:], "hello")
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("content differs (len %d, want %d)", len(got), len(want))
	}
	// ReadFile: capped at 1 MiB, eof only at the end.
	r := must(t, s, readReq("f", 0, 10<<20)).GetReadFile()
	if len(r.GetData()) != maxReadSize || r.GetEof() || !bytes.Equal(r.GetData(), want[:maxReadSize]) {
		t.Errorf("read 0: %d bytes eof=%v", len(r.GetData()), r.GetEof())
	}
	r = must(t, s, readReq("f", size-3, 10)).GetReadFile()
	if !bytes.Equal(r.GetData(), want[size-3:]) || !r.GetEof() {
		t.Errorf("read tail = %q eof=%v", r.GetData(), r.GetEof())
	}
	r = must(t, s, readReq("f", 8, 7)).GetReadFile()
	if string(r.GetData()) != "\xab\xabhello" || r.GetEof() {
		t.Errorf("read middle = %q eof=%v", r.GetData(), r.GetEof())
	}
	r = must(t, s, readReq("f", size, 0)).GetReadFile()
	if len(r.GetData()) != 0 || !r.GetEof() {
		t.Errorf("read at end = %q eof=%v", r.GetData(), r.GetEof())
	}
	// O_APPEND ignores the offset.
	must(t, s, write("f", unix.O_APPEND, 0, []byte("END"), 0, 0))
	// O_CREAT through Write.
	must(t, s, write("new", unix.O_CREAT|unix.O_TRUNC, 4, []byte("x"), 0, 0))
	st := must(t, s, stat("f", false)).GetStat()
	if st.GetSize() != size+3 {
		t.Errorf("size after append = %d, want %d", st.GetSize(), size+3)
	}
	if st := must(t, s, stat("new", false)).GetStat(); st.GetSize() != 5 || st.GetMode() != 0o644 || st.GetKind() != agentv1.Kind_KIND_REGULAR {
		t.Errorf("new: %v", st)
	}
	// Truncate both ways.
	for _, n := range []int64{7, 100} {
		must(t, s, &agentv1.Request{Op: &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Lane: lane, Path: "f", Length: n}}})
		if st := must(t, s, stat("f", false)).GetStat(); st.GetSize() != n {
			t.Errorf("size after truncate = %d, want %d", st.GetSize(), n)
		}
	}
	r = must(t, s, readReq("f", 0, 100)).GetReadFile()
	wantT := append(append([]byte{}, want[:7]...), make([]byte, 93)...)
	if !bytes.Equal(r.GetData(), wantT) || !r.GetEof() {
		t.Errorf("after truncate = %q", r.GetData())
	}
}

func TestWriteDirect(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	must(t, s, create("f"))
	resp := s.Handle(write("f", unix.O_DIRECT, 0, nil, 8192, 7))
	if errnoOf(resp) == unix.EINVAL {
		t.Skipf("O_DIRECT not supported on %s: %s", dir, resp.GetError())
	}
	if resp.GetErrno() != 0 || resp.GetRet() != 8192 {
		t.Fatalf("O_DIRECT write: ret %d errno %d (%s)", resp.GetRet(), resp.GetErrno(), resp.GetError())
	}
	resp = s.Handle(write("f", unix.O_DIRECT, 0, bytes.Repeat([]byte{1}, 4096), 0, 0))
	if resp.GetErrno() != 0 || resp.GetRet() != 4096 {
		t.Fatalf("O_DIRECT data write: ret %d errno %d (%s)", resp.GetRet(), resp.GetErrno(), resp.GetError())
	}
}

func TestXattr(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	setup(t, dir)
	set := func(name string, v string, flags uint32) *agentv1.Response {
		return s.Handle(&agentv1.Request{Op: &agentv1.Request_Setxattr{Setxattr: &agentv1.Setxattr{
			Lane: lane, Path: "d/f", Name: name, Value: []byte(v), Flags: flags}}})
	}
	if r := set("user.a", "1", 0); errnoOf(r) == unix.EOPNOTSUPP || errnoOf(r) == unix.ENOTSUP {
		t.Skipf("%s does not support user xattrs: %s", dir, r.GetError())
	} else if r.GetErrno() != 0 {
		t.Fatalf("setxattr: %s", r.GetError())
	}
	tests := []struct {
		name  string
		flags uint32
		want  syscall.Errno
	}{
		{"user.a", unix.XATTR_CREATE, unix.EEXIST},
		{"user.a", unix.XATTR_REPLACE, 0},
		{"user.b", unix.XATTR_REPLACE, unix.ENODATA},
		{"user.b", unix.XATTR_CREATE, 0},
	}
	for _, tt := range tests {
		if got := errnoOf(set(tt.name, "2", tt.flags)); got != tt.want {
			t.Errorf("setxattr %s flags %d: errno %v, want %v", tt.name, tt.flags, got, tt.want)
		}
	}
	buf := make([]byte, 16)
	n, err := unix.Getxattr(filepath.Join(dir, "d/f"), "user.a", buf)
	if err != nil || string(buf[:n]) != "2" {
		t.Errorf("getxattr user.a = %q, %v", buf[:n], err)
	}
	rm := func(name string) syscall.Errno {
		return errnoOf(s.Handle(&agentv1.Request{Op: &agentv1.Request_Removexattr{Removexattr: &agentv1.Removexattr{Lane: lane, Path: "d/f", Name: name}}}))
	}
	if got := rm("user.a"); got != 0 {
		t.Errorf("removexattr: %v", got)
	}
	if got := rm("user.a"); got != unix.ENODATA {
		t.Errorf("removexattr twice: %v, want ENODATA", got)
	}
}

func TestUtimens(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	setup(t, dir)
	set := func(sec, nsec int64) *agentv1.TimeValue {
		return &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_SET, Time: &agentv1.Timespec{Sec: sec, Nsec: nsec}}
	}
	omit := &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_OMIT}
	now := &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_NOW}
	ut := func(p string, a, m *agentv1.TimeValue, nofollow bool) {
		t.Helper()
		must(t, s, &agentv1.Request{Op: &agentv1.Request_Utimens{Utimens: &agentv1.Utimens{Lane: lane, Path: p, Atime: a, Mtime: m, Nofollow: nofollow}}})
	}
	get := func(p string) (a, m *agentv1.Timespec) {
		st := must(t, s, stat(p, false)).GetStat()
		return st.GetAtime(), st.GetMtime()
	}
	ut("d/f", set(2147483648, 5), set(1000, 999999999), false)
	if a, m := get("d/f"); a.GetSec() != 2147483648 || a.GetNsec() != 5 || m.GetSec() != 1000 || m.GetNsec() != 999999999 {
		t.Errorf("after SET: atime %v mtime %v", a, m)
	}
	ut("d/f", omit, set(7, 0), false)
	if a, m := get("d/f"); a.GetSec() != 2147483648 || m.GetSec() != 7 {
		t.Errorf("after OMIT/SET: atime %v mtime %v", a, m)
	}
	ut("d/f", nil, now, false) // unspecified = omit
	if a, m := get("d/f"); a.GetSec() != 2147483648 || m.GetSec() < 1e9 || m.GetSec() > 1e10 {
		t.Errorf("after OMIT/NOW: atime %v mtime %v", a, m)
	}
	// Through the symlink vs on it.
	ut("s", set(11, 0), set(12, 0), true)
	if _, m := get("s"); m.GetSec() != 12 {
		t.Errorf("nofollow: symlink mtime %v", m)
	}
	if _, m := get("d/f"); m.GetSec() == 12 {
		t.Errorf("nofollow changed the target")
	}
	ut("s", set(21, 0), set(22, 0), false)
	if _, m := get("d/f"); m.GetSec() != 22 {
		t.Errorf("follow: target mtime %v", m)
	}
}

func TestChmodChownLinks(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	s, dir := newServer(t)
	setup(t, dir)
	must(t, s, &agentv1.Request{Op: &agentv1.Request_Chmod{Chmod: &agentv1.Chmod{Lane: lane, Path: "d/f", Mode: 0o4751}}})
	if st := must(t, s, stat("d/f", false)).GetStat(); st.GetMode() != 0o4751 {
		t.Errorf("mode = %o", st.GetMode())
	}
	chown := func(p string, uid, gid int64) {
		t.Helper()
		must(t, s, &agentv1.Request{Op: &agentv1.Request_Chown{Chown: &agentv1.Chown{Lane: lane, Path: p, Uid: uid, Gid: gid}}})
	}
	chown("d/f", 1234, -1)
	chown("d/f", -1, 5678)
	if st := must(t, s, stat("d/f", false)).GetStat(); st.GetUid() != 1234 || st.GetGid() != 5678 {
		t.Errorf("owner = %d:%d", st.GetUid(), st.GetGid())
	}
	// Chown does not follow the symlink.
	chown("s", 42, 43)
	if st := must(t, s, stat("s", false)).GetStat(); st.GetUid() != 42 || st.GetKind() != agentv1.Kind_KIND_SYMLINK {
		t.Errorf("symlink owner = %d, kind %v", st.GetUid(), st.GetKind())
	}
	if st := must(t, s, stat("s", true)).GetStat(); st.GetUid() != 1234 || st.GetKind() != agentv1.Kind_KIND_REGULAR {
		t.Errorf("followed stat: uid %d kind %v", st.GetUid(), st.GetKind())
	}
	// Hard link, rename, readlink.
	must(t, s, &agentv1.Request{Op: &agentv1.Request_Link{Link: &agentv1.Link{Lane: lane, Path: "d/f", NewPath: "e/h"}}})
	if st := must(t, s, stat("d/f", false)).GetStat(); st.GetNlink() != 2 {
		t.Errorf("nlink = %d", st.GetNlink())
	}
	must(t, s, &agentv1.Request{Op: &agentv1.Request_Rename{Rename: &agentv1.Rename{Lane: lane, Path: "d", NewPath: "e", Flags: unix.RENAME_EXCHANGE}}})
	if st := must(t, s, stat("d/h", false)).GetStat(); st.GetNlink() != 2 {
		t.Errorf("after exchange: d/h nlink = %d", st.GetNlink())
	}
	r := must(t, s, &agentv1.Request{Op: &agentv1.Request_Readlink{Readlink: &agentv1.Readlink{Lane: lane, Path: "s"}}})
	if got := r.GetReadlink().GetTarget(); got != "d/f" {
		t.Errorf("readlink = %q", got)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	setup(t, dir)
	// A symlink out of the lane and a FIFO must not be followed or opened.
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "outside"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "slash")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "e/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := func(mode agentv1.TimeMode) string {
		return string(must(t, s, fp(mode, false)).GetFingerprint().GetRoot())
	}
	r1 := must(t, s, fp(agentv1.TimeMode_TIME_MODE_ALL, true)).GetFingerprint()
	r2 := must(t, s, fp(agentv1.TimeMode_TIME_MODE_ALL, true)).GetFingerprint()
	if !bytes.Equal(r1.GetRoot(), r2.GetRoot()) || len(r1.GetRoot()) != 32 {
		t.Fatalf("two walks differ under ALL (reading must not change atimes): %x vs %x", r1.GetRoot(), r2.GetRoot())
	}
	// "", d, d/f, e, e/fifo, out, s, slash
	wantPaths := []string{"", "d", "d/f", "e", "e/fifo", "out", "s", "slash"}
	if r1.GetEntries() != uint64(len(wantPaths)) || len(r1.GetLeaves()) != len(wantPaths) {
		t.Fatalf("entries = %d, leaves = %d, want %d", r1.GetEntries(), len(r1.GetLeaves()), len(wantPaths))
	}
	for i, l := range r1.GetLeaves() {
		if l.GetPath() != wantPaths[i] {
			t.Errorf("leaf %d = %q, want %q", i, l.GetPath(), wantPaths[i])
		}
		switch l.GetPath() {
		case "out":
			if l.GetKind() != agentv1.Kind_KIND_SYMLINK || l.GetSymlinkTarget() != "../outside" || l.GetContentHash() != nil {
				t.Errorf("out leaf: %v", l)
			}
		case "d/f":
			if len(l.GetContentHash()) != 32 || l.GetSize() != 3 {
				t.Errorf("d/f leaf: %v", l)
			}
		case "e/fifo":
			if l.GetKind() != agentv1.Kind_KIND_FIFO {
				t.Errorf("fifo leaf: %v", l)
			}
		}
	}
	if r := must(t, s, fp(agentv1.TimeMode_TIME_MODE_NONE, false)).GetFingerprint(); len(r.GetLeaves()) != 0 || r.GetEntries() != uint64(len(wantPaths)) {
		t.Errorf("without leaves: %d leaves, %d entries", len(r.GetLeaves()), r.GetEntries())
	}
	// Content and target outside the lane do not matter; content inside does.
	before := root(agentv1.TimeMode_TIME_MODE_NONE)
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "outside"), []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := root(agentv1.TimeMode_TIME_MODE_NONE); got != before {
		t.Error("root changed when a file outside the lane changed")
	}
	must(t, s, write("d/f", 0, 1, []byte("X"), 0, 0))
	if got := root(agentv1.TimeMode_TIME_MODE_NONE); got == before {
		t.Error("root did not change when content changed (same size)")
	}
	// Only times change: NONE stays, MTIME moves.
	noneBefore, mtimeBefore := root(agentv1.TimeMode_TIME_MODE_NONE), root(agentv1.TimeMode_TIME_MODE_MTIME)
	must(t, s, &agentv1.Request{Op: &agentv1.Request_Utimens{Utimens: &agentv1.Utimens{Lane: lane, Path: "d/f",
		Mtime: &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_SET, Time: &agentv1.Timespec{Sec: 5}}}}})
	if root(agentv1.TimeMode_TIME_MODE_NONE) != noneBefore {
		t.Error("NONE root changed with mtime")
	}
	if root(agentv1.TimeMode_TIME_MODE_MTIME) == mtimeBefore {
		t.Error("MTIME root did not change with mtime")
	}
}

func TestFingerprintUnknownLane(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	resp := s.Handle(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: "nope"}}})
	if errnoOf(resp) != unix.ENOENT || !strings.Contains(resp.GetError(), "no such lane") {
		t.Errorf("errno %v (%s), want ENOENT no such lane", errnoOf(resp), resp.GetError())
	}
}

func TestPingClock(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	p := must(t, s, &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}).GetPing()
	if p.GetVersion() != "test" || p.GetMonotonicNs() <= 0 || len(p.GetLanes()) != 0 {
		t.Errorf("ping = %v", p)
	}
	c := must(t, s, &agentv1.Request{Op: &agentv1.Request_GetClock{GetClock: &agentv1.GetClock{}}}).GetClock()
	if c.GetSec() < 1.6e9 {
		t.Errorf("clock = %v", c)
	}
	must(t, s, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
}

func TestExec(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	s.Machine = true
	script := "#!/bin/sh\necho out \"$@\"; echo err >&2; exit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "x.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := must(t, s, &agentv1.Request{Op: &agentv1.Request_Exec{Exec: &agentv1.Exec{Lane: lane, Path: "x.sh", Args: []string{"a", "b"}}}}).GetExec()
	if r.GetExitCode() != 3 || r.GetSignal() != 0 || string(r.GetStdout()) != "out a b\n" || string(r.GetStderr()) != "err\n" {
		t.Errorf("exec = %v", r)
	}
	resp := s.Handle(&agentv1.Request{Op: &agentv1.Request_Exec{Exec: &agentv1.Exec{Path: "/bin/sleep", Args: []string{"10"}, TimeoutMs: 50}}})
	if errnoOf(resp) != unix.ETIMEDOUT || resp.GetExec().GetSignal() != int32(unix.SIGKILL) {
		t.Errorf("timeout: errno %v, result %v", errnoOf(resp), resp.GetExec())
	}
	resp = s.Handle(&agentv1.Request{Op: &agentv1.Request_Exec{Exec: &agentv1.Exec{Path: "/nonexistent/bin"}}})
	if errnoOf(resp) != unix.ENOENT {
		t.Errorf("missing program: errno %v (%s)", errnoOf(resp), resp.GetError())
	}
	resp = s.Handle(&agentv1.Request{Op: &agentv1.Request_Exec{Exec: &agentv1.Exec{Path: "bin/true"}}})
	if errnoOf(resp) != unix.EINVAL {
		t.Errorf("relative program without lane: errno %v", errnoOf(resp))
	}
	r = must(t, s, &agentv1.Request{Op: &agentv1.Request_Exec{Exec: &agentv1.Exec{Path: "/bin/sh", Args: []string{"-c", "head -c 2000000 /dev/zero"}}}}).GetExec()
	if len(r.GetStdout()) != execOutputMax {
		t.Errorf("stdout %d bytes, want capped at %d", len(r.GetStdout()), execOutputMax)
	}
}

func TestKmsg(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want *agentv1.KmsgLine
	}{
		{"6,339,5140900,-;NET: Registered protocol family 10\n", &agentv1.KmsgLine{Seq: 339, Level: 6, Text: "NET: Registered protocol family 10"}},
		{"30,340,5690716,-;udevd[80]: starting version 181\n SUBSYSTEM=acpi\n", &agentv1.KmsgLine{Seq: 340, Level: 6, Text: "udevd[80]: starting version 181"}},
		{"3,1,2,-,caller=T1;x;y", &agentv1.KmsgLine{Seq: 1, Level: 3, Text: "x;y"}},
		{"garbage", nil},
		{"1,2;x", nil},
		{"a,2,3,-;x", nil},
		{"1,b,3,-;x", nil},
	}
	for _, tt := range tests {
		got, ok := parseKmsg([]byte(tt.in))
		if ok != (tt.want != nil) || (ok && (got.Seq != tt.want.Seq || got.Level != tt.want.Level || got.Text != tt.want.Text)) {
			t.Errorf("parseKmsg(%q) = %v, %v; want %v", tt.in, got, ok, tt.want)
		}
	}
	lines, err := readKmsg("/dev/kmsg", 0, 5)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		t.Skipf("no readable /dev/kmsg: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) > 5 {
		t.Errorf("%d lines, capped at 5", len(lines))
	}
	for i := 1; i < len(lines); i++ {
		if lines[i].Seq <= lines[i-1].Seq {
			t.Errorf("sequence not increasing: %d then %d", lines[i-1].Seq, lines[i].Seq)
		}
	}
	if len(lines) > 0 {
		after := lines[len(lines)-1].Seq
		more, err := readKmsg("/dev/kmsg", after, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range more {
			if l.Seq <= after {
				t.Errorf("line %d not after %d", l.Seq, after)
			}
		}
	}
}

func TestResolveDevice(t *testing.T) {
	t.Parallel()
	sys := t.TempDir()
	for name, serial := range map[string]string{"vda": "lane-a\n", "vdb": "  lane-b  ", "loop0": ""} {
		if err := os.Mkdir(filepath.Join(sys, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if serial != "" {
			if err := os.WriteFile(filepath.Join(sys, name, "serial"), []byte(serial), 0o444); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		dev, want string
		errno     syscall.Errno
	}{
		{"serial:lane-a", "/dev/vda", 0},
		{"serial:lane-b", "/dev/vdb", 0},
		{"serial:lane-c", "", unix.ENOENT},
		{"serial:", "", unix.EINVAL},
		{"/dev/sdz", "/dev/sdz", 0},
		{"vda", "", unix.EINVAL},
	}
	for _, tt := range tests {
		got, err := resolveDevice(tt.dev, sys)
		var errno syscall.Errno
		if err != nil && !errors.As(err, &errno) {
			t.Errorf("resolveDevice(%q): error %v without errno", tt.dev, err)
		}
		if got != tt.want || errno != tt.errno {
			t.Errorf("resolveDevice(%q) = %q, %v; want %q, %v", tt.dev, got, err, tt.want, tt.errno)
		}
	}
}

// TestDeviceRemembered: a serial once resolved is not looked up again (the
// disk's serial file may go); one that failed is looked up again.
func TestDeviceRemembered(t *testing.T) {
	t.Parallel()
	sys := t.TempDir()
	serialFile := filepath.Join(sys, "vda", "serial")
	if err := os.Mkdir(filepath.Dir(serialFile), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{sysBlock: sys}
	steps := []struct {
		name      string
		serial    string // written to vda's serial first; "-" removes it
		dev, want string
		errno     syscall.Errno
	}{
		{"not there yet", "-", "serial:lane0", "", unix.ENOENT},
		{"appears", "lane0", "serial:lane0", "/dev/vda", 0},
		{"remembered after its serial goes", "-", "serial:lane0", "/dev/vda", 0},
		{"another still looked up", "-", "serial:lane1", "", unix.ENOENT},
		{"a path passes", "-", "/dev/vdq", "/dev/vdq", 0},
	}
	for _, st := range steps {
		if st.serial == "-" {
			if err := os.Remove(serialFile); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(serialFile, []byte(st.serial), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := s.device(st.dev)
		var errno syscall.Errno
		if err != nil && !errors.As(err, &errno) {
			t.Errorf("%s: device(%q): error %v without errno", st.name, st.dev, err)
		}
		if got != st.want || errno != st.errno {
			t.Errorf("%s: device(%q) = %q, %v; want %q, %v", st.name, st.dev, got, err, st.want, st.errno)
		}
	}
}

func TestMountOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		flags uintptr
		data  string
	}{
		{"", 0, ""},
		{"noatime,errors=remount-ro,ro", unix.MS_NOATIME | unix.MS_RDONLY, "errors=remount-ro"},
		{"ro,rw,user_xattr", 0, "user_xattr"},
		{",sync,,", unix.MS_SYNCHRONOUS, ""},
	}
	for _, tt := range tests {
		flags, data := mountOptions(tt.in)
		if flags != tt.flags || data != tt.data {
			t.Errorf("mountOptions(%q) = %#x, %q; want %#x, %q", tt.in, flags, data, tt.flags, tt.data)
		}
	}
}

func TestUnmountedLane(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	s.lanes = map[string]*laneState{lane: {}}
	resp := s.Handle(mkdir("x"))
	if errnoOf(resp) != unix.ENOENT || !strings.Contains(resp.GetError(), "not mounted") {
		t.Errorf("op on unmounted lane: errno %v (%s)", errnoOf(resp), resp.GetError())
	}
	resp = s.Handle(&agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane}}})
	if errnoOf(resp) != unix.EPERM {
		t.Errorf("mount without Machine: errno %v", errnoOf(resp))
	}
	s.Machine = true
	resp = s.Handle(&agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane}}})
	if errnoOf(resp) != unix.EINVAL {
		t.Errorf("remount of a lane never mounted: errno %v (%s)", errnoOf(resp), resp.GetError())
	}
}

func TestHandleRecoversPanic(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	s.testHook = func(*agentv1.Request, *agentv1.Response) { panic("boom") }
	resp := s.Handle(&agentv1.Request{Id: 9, Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
	if resp.GetId() != 9 || errnoOf(resp) != unix.EIO || resp.GetError() != "agent: panic: boom" {
		t.Errorf("resp = %v", resp)
	}
	// A oneof wrapper holding nil is handled like an empty message.
	s.testHook = nil
	if resp := s.Handle(&agentv1.Request{Op: &agentv1.Request_Write{}}); errnoOf(resp) != unix.EINVAL {
		t.Errorf("nil write: errno %v (%s)", errnoOf(resp), resp.GetError())
	}
}
