package opspec

import (
	"fmt"
	"strconv"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Format writes an Op in the short form. Ops the short form cannot express
// exactly (binary xattr values, rename flags, ...) come out as protojson.
func Format(op *themisv1.Op) string {
	if s, ok := short(op); ok {
		if op.GetKeepMount() {
			return SameMount + " " + s
		}
		return s
	}
	b, err := protojson.Marshal(op)
	if err != nil {
		return fmt.Sprintf("<unprintable op: %v>", err)
	}
	return string(b)
}

func flagWords(bits uint32, allowed ...string) (string, bool) {
	var words []string
	for _, fn := range flagNames {
		if bits&fn.bit == fn.bit && contains(allowed, fn.name) {
			words = append(words, fn.name)
			bits &^= fn.bit
		}
	}
	return strings.Join(words, " "), bits == 0
}

func join(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}

func octal(m uint32) string { return fmt.Sprintf("0%o", m) }

func timeWord(t *agentv1.TimeValue) string {
	switch t.GetKind() {
	case agentv1.TimeValue_KIND_NOW:
		return "now"
	case agentv1.TimeValue_KIND_SET:
		if t.GetTime().GetNsec() == 0 {
			return strconv.FormatInt(t.GetTime().GetSec(), 10)
		}
		return fmt.Sprintf("%d.%09d", t.GetTime().GetSec(), t.GetTime().GetNsec())
	default:
		return "omit"
	}
}

func safe(paths ...string) bool {
	for _, p := range paths {
		if p == "" || strings.ContainsAny(p, " \t\n{") {
			return false
		}
	}
	return true
}

func short(op *themisv1.Op) (string, bool) {
	switch o := op.GetOp().(type) {
	case *themisv1.Op_Create:
		c := o.Create
		words, ok := flagWords(c.GetFlags()&^(oCreat|oWronly), "excl", "trunc", "direct")
		return join("create", c.GetPath(), octal(c.GetMode()), words), ok && c.GetFlags()&(oCreat|oWronly) == oCreat|oWronly && safe(c.GetPath())
	case *themisv1.Op_Write:
		w := o.Write
		words, ok := flagWords(w.GetFlags()&^oRdwr, "append", "sync", "direct", "creat")
		return join("write", w.GetPath(), strconv.FormatInt(w.GetOffset(), 10), strconv.FormatInt(w.GetSize(), 10), fmt.Sprintf("0x%02x", w.GetFill()), words),
			ok && len(w.GetData()) == 0 && w.GetFlags()&oRdwr == oRdwr && w.GetFill() <= 0xff && safe(w.GetPath())
	case *themisv1.Op_Truncate:
		return join("truncate", o.Truncate.GetPath(), strconv.FormatInt(o.Truncate.GetLength(), 10)), safe(o.Truncate.GetPath())
	case *themisv1.Op_Unlink:
		return "unlink " + o.Unlink.GetPath(), safe(o.Unlink.GetPath())
	case *themisv1.Op_Mkdir:
		return join("mkdir", o.Mkdir.GetPath(), octal(o.Mkdir.GetMode())), safe(o.Mkdir.GetPath())
	case *themisv1.Op_Rmdir:
		return "rmdir " + o.Rmdir.GetPath(), safe(o.Rmdir.GetPath())
	case *themisv1.Op_Chmod:
		return join("chmod", o.Chmod.GetPath(), octal(o.Chmod.GetMode())), safe(o.Chmod.GetPath())
	case *themisv1.Op_Chown:
		c := o.Chown
		switch {
		case c.GetGid() == -1 && c.GetUid() >= 0:
			return join("chown", c.GetPath(), strconv.FormatInt(c.GetUid(), 10)), safe(c.GetPath())
		case c.GetUid() == -1 && c.GetGid() >= 0:
			return join("chgrp", c.GetPath(), strconv.FormatInt(c.GetGid(), 10)), safe(c.GetPath())
		}
	case *themisv1.Op_Setxattr:
		x := o.Setxattr
		fl := map[uint32]string{0: "", 1: "create", 2: "replace"}[x.GetFlags()]
		return join("setxattr", x.GetPath(), x.GetName(), string(x.GetValue()), fl),
			x.GetFlags() <= 2 && safe(x.GetPath(), x.GetName(), string(x.GetValue()))
	case *themisv1.Op_Removexattr:
		return join("removexattr", o.Removexattr.GetPath(), o.Removexattr.GetName()), safe(o.Removexattr.GetPath(), o.Removexattr.GetName())
	case *themisv1.Op_Rename:
		r := o.Rename
		word, ok := "", r.GetFlags() == 0
		for _, f := range renameFlags {
			if r.GetFlags() == f.bit {
				word, ok = f.name, true
			}
		}
		return join("rename", r.GetPath(), r.GetNewPath(), word), ok && safe(r.GetPath(), r.GetNewPath())
	case *themisv1.Op_Link:
		return join("link", o.Link.GetPath(), o.Link.GetNewPath()), safe(o.Link.GetPath(), o.Link.GetNewPath())
	case *themisv1.Op_Symlink:
		return join("symlink", o.Symlink.GetTarget(), o.Symlink.GetPath()), safe(o.Symlink.GetTarget(), o.Symlink.GetPath())
	case *themisv1.Op_Utimens:
		u := o.Utimens
		return join("utimens", u.GetPath(), timeWord(u.GetAtime()), timeWord(u.GetMtime())), !u.GetNofollow() && safe(u.GetPath())
	case *themisv1.Op_Fsync:
		if o.Fsync.GetDatasync() {
			// The empty path is syncfs, which has no datasync form.
			return "fdatasync " + o.Fsync.GetPath(), safe(o.Fsync.GetPath())
		}
		return join("fsync", o.Fsync.GetPath()), !strings.ContainsAny(o.Fsync.GetPath(), " \t\n{")
	case *themisv1.Op_Sync:
		return "sync", true
	case *themisv1.Op_DropCaches:
		return fmt.Sprintf("drop-caches %d", o.DropCaches.GetLevel()), o.DropCaches.GetLevel() >= 1 && o.DropCaches.GetLevel() <= 3
	case *themisv1.Op_SetClock:
		return "set-clock " + timeWord(&agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_SET, Time: o.SetClock.GetTime()}), true
	case *themisv1.Op_Umount:
		return "umount", true
	case *themisv1.Op_Mount:
		return "mount", o.Mount.GetDevice() == "" && o.Mount.GetFstype() == "" && o.Mount.GetOptions() == "" && !o.Mount.GetReadOnly()
	}
	return "", false
}
