package repro

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/opspec"
)

// renameFlags are the rename flags fstests' src/renameat2 takes: its
// option and _require_renameat2's name for each.
var renameFlags = []struct {
	flag      uint32
	opt, name string
}{{unix.RENAME_NOREPLACE, "-n", "noreplace"}, {unix.RENAME_EXCHANGE, "-x", "exchange"}, {unix.RENAME_WHITEOUT, "-w", "whiteout"}}

// shOp is one trace op as an fstests test runs it: a command line whose
// words are quoted for sh, run in $SCRATCH_MNT, and what the test must
// require for it (_require_attrs, _require_renameat2 NAME).
type shOp struct {
	Cmd      string
	Attrs    bool
	Renameat string
}

// shStep is trace op s as a shell command, as the agent runs it
// (agent/inguest/ops_linux.go) and repro.c does: coreutils, attr and
// xfs_io where one does exactly the syscall, perl's sysopen, mkdir and
// syswrite where none does (a mode under the umask, open flags, fill
// bytes), fstests' src/renameat2 for a rename with flags. Paths are
// relative to $SCRATCH_MNT, written ./PATH so that none reads as an
// option. It refuses what a test on the host cannot do as the agent did.
func shStep(s string) (shOp, error) {
	req, err := opspec.ParseRequest(s)
	if err != nil {
		return shOp{}, fmt.Errorf("repro: trace op %q: %w", s, err)
	}
	switch op := req.GetOp().(type) {
	case *agentv1.Request_Create:
		c := op.Create
		return cmd("$PERL_PROG", "-e", `sysopen(F, $ARGV[0], `+oct(c.GetFlags()|unix.O_CREAT)+`, `+oct(c.GetMode())+`) or die "$!\n"`, shPath(c.GetPath())), nil
	case *agentv1.Request_Write:
		return shWrite(s, op.Write)
	case *agentv1.Request_Truncate:
		return cmd("$XFS_IO_PROG", "-c", fmt.Sprintf("truncate %d", op.Truncate.GetLength()), shPath(op.Truncate.GetPath())), nil
	case *agentv1.Request_Unlink:
		return cmd("unlink", "--", shPath(op.Unlink.GetPath())), nil
	case *agentv1.Request_Mkdir:
		return cmd("$PERL_PROG", "-e", `mkdir($ARGV[0], `+oct(op.Mkdir.GetMode())+`) or die "$!\n"`, shPath(op.Mkdir.GetPath())), nil
	case *agentv1.Request_Rmdir:
		return cmd("rmdir", "--", shPath(op.Rmdir.GetPath())), nil
	case *agentv1.Request_Chmod:
		// Five digits: GNU chmod keeps a directory's set-id bits under a
		// shorter numeric mode.
		return cmd("chmod", fmt.Sprintf("0%04o", op.Chmod.GetMode()), "--", shPath(op.Chmod.GetPath())), nil
	case *agentv1.Request_Chown:
		return cmd("chown", "-h", owner(op.Chown.GetUid(), op.Chown.GetGid()), "--", shPath(op.Chown.GetPath())), nil
	case *agentv1.Request_Setxattr:
		x := op.Setxattr
		if x.GetFlags() != 0 {
			return shOp{}, fmt.Errorf("repro: trace op %q: setxattr flags %d: setfattr sets none (not exported as fstests)", s, x.GetFlags())
		}
		o := cmd("setfattr", "-h", "-n", x.GetName(), "-v", fmt.Sprintf("0x%x", x.GetValue()), "--", shPath(x.GetPath()))
		o.Attrs = true
		return o, nil
	case *agentv1.Request_Removexattr:
		o := cmd("setfattr", "-h", "-x", op.Removexattr.GetName(), "--", shPath(op.Removexattr.GetPath()))
		o.Attrs = true
		return o, nil
	case *agentv1.Request_Rename:
		return shRename(s, op.Rename)
	case *agentv1.Request_Link:
		return cmd("ln", "-P", "-T", "--", shPath(op.Link.GetPath()), shPath(op.Link.GetNewPath())), nil
	case *agentv1.Request_Symlink:
		return cmd("ln", "-s", "-T", "--", op.Symlink.GetTarget(), shPath(op.Symlink.GetPath())), nil
	case *agentv1.Request_Utimens:
		return shUtimens(op.Utimens), nil
	case *agentv1.Request_Fsync:
		f := op.Fsync
		what := "fsync"
		if f.GetDatasync() {
			what = "fdatasync"
		}
		if f.GetPath() == "" {
			return cmd("$XFS_IO_PROG", "-r", "-c", "syncfs", "."), nil // syncfs of the lane, as the agent does
		}
		return cmd("$XFS_IO_PROG", "-r", "-c", what, shPath(f.GetPath())), nil
	case *agentv1.Request_Sync:
		return cmd("sync"), nil
	case *agentv1.Request_DropCaches:
		n := op.DropCaches.GetLevel()
		if n < 1 || n > 3 {
			return shOp{}, fmt.Errorf("repro: trace op %q: drop_caches level %d, want 1 to 3", s, n)
		}
		return cmd("sh", "-c", fmt.Sprintf("sync && echo %d >/proc/sys/vm/drop_caches", n)), nil
	}
	return shOp{}, fmt.Errorf("repro: trace op %q: not exported as fstests (a test on the host does not set its clock, mount or run programs)", s)
}

// shWrite is a write op: perl opens the path with the op's flags (write
// access added, 0644 where it creates) and writes size fill bytes at
// offset in chunks of at most 1 MiB, as the agent does. O_DIRECT needs
// an aligned buffer perl does not give: refused.
func shWrite(s string, w *agentv1.Write) (shOp, error) {
	if len(w.GetData()) > 0 {
		return shOp{}, fmt.Errorf("repro: trace op %q: a write of given bytes is not exported (only fill bytes)", s)
	}
	if w.GetSize() < 0 || w.GetSize() > maxWrite || w.GetOffset() < 0 {
		return shOp{}, fmt.Errorf("repro: trace op %q: size %d or offset %d out of range", s, w.GetSize(), w.GetOffset())
	}
	flags := uint32(w.GetFlags())
	if flags&unix.O_DIRECT != 0 {
		return shOp{}, fmt.Errorf("repro: trace op %q: O_DIRECT is not exported as fstests (perl's buffers are not aligned)", s)
	}
	if flags&unix.O_ACCMODE == unix.O_RDONLY {
		flags |= unix.O_WRONLY
	}
	prog := fmt.Sprintf(`sysopen(F, $ARGV[0], %s, 0644) or die "$!\n"; `+
		`my ($off, $left) = (%d, %d); while ($left > 0) { my $n = $left < 1048576 ? $left : 1048576; `+
		`sysseek(F, $off, 0) or die "$!\n"; my $w = syswrite(F, chr(%d) x $n); defined $w or die "$!\n"; $off += $w; $left -= $w } `+
		`close(F) or die "$!\n"`, oct(flags), w.GetOffset(), w.GetSize(), byte(w.GetFill()))
	return cmd("$PERL_PROG", "-e", prog, shPath(w.GetPath())), nil
}

// shRename is rename(2) where the op has no flags (perl's rename), else
// fstests' src/renameat2 with the flag's option.
func shRename(s string, r *agentv1.Rename) (shOp, error) {
	if r.GetFlags() == 0 {
		return cmd("$PERL_PROG", "-e", `rename($ARGV[0], $ARGV[1]) or die "$!\n"`, shPath(r.GetPath()), shPath(r.GetNewPath())), nil
	}
	for _, f := range renameFlags {
		if uint32(r.GetFlags()) == f.flag {
			o := cmd("$here/src/renameat2", f.opt, shPath(r.GetPath()), shPath(r.GetNewPath()))
			o.Renameat = f.name
			return o, nil
		}
	}
	return shOp{}, fmt.Errorf("repro: trace op %q: rename flags %#x: fstests' src/renameat2 takes one of noreplace, exchange, whiteout", s, r.GetFlags())
}

// shUtimens is touch -c with each time the op sets (-a, -m; a value as
// @SEC.NSEC, else the current time), -h where it does not follow a
// symlink. A time it omits is left as it is. -c: touch makes no file (a
// missing one is no error to it, where utimensat says ENOENT).
func shUtimens(u *agentv1.Utimens) shOp {
	base := []string{"touch", "-c"}
	if u.GetNofollow() {
		base = append(base, "-h")
	}
	var parts []string
	for _, t := range []struct {
		opt string
		v   *agentv1.TimeValue
	}{{"-a", u.GetAtime()}, {"-m", u.GetMtime()}} {
		argv := append(slices.Clone(base), t.opt)
		switch t.v.GetKind() {
		case agentv1.TimeValue_KIND_SET:
			argv = append(argv, "-d", fmt.Sprintf("@%d.%09d", t.v.GetTime().GetSec(), t.v.GetTime().GetNsec()))
		case agentv1.TimeValue_KIND_NOW:
		default:
			continue
		}
		parts = append(parts, cmd(append(argv, "--", shPath(u.GetPath()))...).Cmd)
	}
	if len(parts) == 0 {
		return cmd("true")
	}
	return cmd("sh", "-c", strings.Join(parts, " && "))
}

// cmd is argv as one bash command line: every word quoted (bashQuote), but a leading
// $PERL_PROG, $XFS_IO_PROG or $here/... left for the shell to expand and
// split, as fstests writes them ($XFS_IO_PROG is "xfs_io -i").
func cmd(argv ...string) shOp {
	q := make([]string, len(argv))
	for i, a := range argv {
		if i == 0 && strings.HasPrefix(a, "$") {
			q[i] = a
			continue
		}
		q[i] = bashQuote(a)
	}
	return shOp{Cmd: strings.Join(q, " ")}
}

// shPath is a lane-relative path in $SCRATCH_MNT: "./" before it, so that
// none starts with "-"; the empty path is ".".
func shPath(p string) string {
	if p == "" {
		return "."
	}
	return "./" + p
}

// oct is n as a perl octal literal.
func oct(n uint32) string { return "0" + strconv.FormatUint(uint64(n), 8) }

// owner is chown's OWNER:GROUP of a chown op; -1 leaves it.
func owner(uid, gid int64) string {
	var u, g string
	if uid != -1 {
		u = strconv.FormatInt(uid, 10)
	}
	if gid != -1 {
		g = strconv.FormatInt(gid, 10)
	}
	return u + ":" + g
}
