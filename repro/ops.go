package repro

import (
	"fmt"
	"strconv"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/opspec"
)

// maxWrite bounds one write op's size as the agent does (64 MiB).
const maxWrite = 64 << 20

// cStep is one trace op as the body of a C function of (int dir) that
// returns a long, -1 with errno set on failure, as the agent runs it
// (agent/inguest/ops_linux.go). Paths are lane-relative; the empty path
// is the lane root ("."), path-form calls go through at().
func cStep(s string) (string, error) {
	req, err := opspec.ParseRequest(s)
	if err != nil {
		return "", fmt.Errorf("repro: trace op %q: %w", s, err)
	}
	switch op := req.GetOp().(type) {
	case *agentv1.Request_Create:
		c := op.Create
		return fmt.Sprintf("int fd = openat(dir, %s, %#o | O_CREAT | O_CLOEXEC, %#o);\n\tif (fd < 0)\n\t\treturn -1;\n\treturn close(fd);",
			cPath(c.GetPath()), c.GetFlags(), c.GetMode()), nil
	case *agentv1.Request_Write:
		w := op.Write
		if len(w.GetData()) > 0 {
			return "", fmt.Errorf("repro: trace op %q: a write of given bytes is not exported (only fill bytes)", s)
		}
		if w.GetSize() < 0 || w.GetSize() > maxWrite || w.GetOffset() < 0 {
			return "", fmt.Errorf("repro: trace op %q: size %d or offset %d out of range", s, w.GetSize(), w.GetOffset())
		}
		return fmt.Sprintf("return do_write(dir, %s, %#o, %dLL, %dLL, 0x%02x);", cPath(w.GetPath()), w.GetFlags(), w.GetOffset(), w.GetSize(), byte(w.GetFill())), nil
	case *agentv1.Request_Truncate:
		return fmt.Sprintf("return truncate(at(%s), %dLL);", cStr(op.Truncate.GetPath()), op.Truncate.GetLength()), nil
	case *agentv1.Request_Unlink:
		return fmt.Sprintf("return unlinkat(dir, %s, 0);", cPath(op.Unlink.GetPath())), nil
	case *agentv1.Request_Mkdir:
		return fmt.Sprintf("return mkdirat(dir, %s, %#o);", cPath(op.Mkdir.GetPath()), op.Mkdir.GetMode()), nil
	case *agentv1.Request_Rmdir:
		return fmt.Sprintf("return unlinkat(dir, %s, AT_REMOVEDIR);", cPath(op.Rmdir.GetPath())), nil
	case *agentv1.Request_Chmod:
		return fmt.Sprintf("return fchmodat(dir, %s, %#o, 0);", cPath(op.Chmod.GetPath()), op.Chmod.GetMode()), nil
	case *agentv1.Request_Chown:
		return fmt.Sprintf("return fchownat(dir, %s, %s, %s, AT_SYMLINK_NOFOLLOW);", cPath(op.Chown.GetPath()), cID(op.Chown.GetUid()), cID(op.Chown.GetGid())), nil
	case *agentv1.Request_Setxattr:
		x := op.Setxattr
		return fmt.Sprintf("return lsetxattr(at(%s), %s, %s, %d, %d);", cStr(x.GetPath()), cStr(x.GetName()), cStr(string(x.GetValue())), len(x.GetValue()), x.GetFlags()), nil
	case *agentv1.Request_Removexattr:
		return fmt.Sprintf("return lremovexattr(at(%s), %s);", cStr(op.Removexattr.GetPath()), cStr(op.Removexattr.GetName())), nil
	case *agentv1.Request_Rename:
		r := op.Rename
		return fmt.Sprintf("return syscall(SYS_renameat2, dir, %s, dir, %s, %d);", cPath(r.GetPath()), cPath(r.GetNewPath()), r.GetFlags()), nil
	case *agentv1.Request_Link:
		return fmt.Sprintf("return linkat(dir, %s, dir, %s, 0);", cPath(op.Link.GetPath()), cPath(op.Link.GetNewPath())), nil
	case *agentv1.Request_Symlink:
		return fmt.Sprintf("return symlinkat(%s, dir, %s);", cStr(op.Symlink.GetTarget()), cPath(op.Symlink.GetPath())), nil
	case *agentv1.Request_Utimens:
		u := op.Utimens
		flags := "0"
		if u.GetNofollow() {
			flags = "AT_SYMLINK_NOFOLLOW"
		}
		return fmt.Sprintf("struct timespec ts[2] = {%s, %s};\n\treturn utimensat(dir, %s, ts, %s);", cTime(u.GetAtime()), cTime(u.GetMtime()), cPath(u.GetPath()), flags), nil
	case *agentv1.Request_Fsync:
		return fmt.Sprintf("return do_fsync(dir, %s, %d);", cStr(op.Fsync.GetPath()), b2i(op.Fsync.GetDatasync())), nil
	case *agentv1.Request_Sync:
		return "sync();\n\treturn 0;", nil
	case *agentv1.Request_DropCaches:
		n := op.DropCaches.GetLevel()
		if n < 1 || n > 3 {
			return "", fmt.Errorf("repro: trace op %q: drop_caches level %d, want 1 to 3", s, n)
		}
		return fmt.Sprintf("return drop_caches(%d);", n), nil
	}
	return "", fmt.Errorf("repro: trace op %q: not exported (a reproducer on the host does not set its clock, mount or run programs)", s)
}

// cStr is s as a C string literal: printable ASCII as it is, every other
// byte as an octal escape (so a literal never runs into the next one).
func cStr(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f && c != '?':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// cPath is a lane-relative path for an *at call: "" is the lane root.
func cPath(p string) string {
	if p == "" {
		return `"."`
	}
	return cStr(p)
}

// cID is an owner id of a chown: -1 leaves it.
func cID(id int64) string {
	if id == -1 {
		return "(uid_t)-1"
	}
	return strconv.FormatInt(id, 10)
}

// cTime is a utimensat timespec initializer.
func cTime(v *agentv1.TimeValue) string {
	switch v.GetKind() {
	case agentv1.TimeValue_KIND_SET:
		return fmt.Sprintf("{%dLL, %dL}", v.GetTime().GetSec(), v.GetTime().GetNsec())
	case agentv1.TimeValue_KIND_NOW:
		return "{0, UTIME_NOW}"
	}
	return "{0, UTIME_OMIT}"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
