package opspec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Linux open(2) and friends' flag bits used by the short form.
const (
	oWronly = 0o1
	oRdwr   = 0o2
	oCreat  = 0o100
	oExcl   = 0o200
	oTrunc  = 0o1000
	oAppend = 0o2000
	oSync   = 0o4010000
	oDirect = 0o40000
)

var flagNames = []struct {
	name string
	bit  uint32
}{
	{"excl", oExcl}, {"trunc", oTrunc}, {"append", oAppend}, {"sync", oSync}, {"direct", oDirect}, {"creat", oCreat},
}

// Usage lists the short forms.
const Usage = `create PATH [MODE] [excl|trunc|direct]...
write PATH OFFSET SIZE [FILL] [append|sync|direct|creat]...
truncate PATH LENGTH
unlink PATH | mkdir PATH [MODE] | rmdir PATH | chmod PATH MODE
chown PATH UID | chgrp PATH GID
setxattr PATH NAME VALUE [create|replace] | removexattr PATH NAME
rename OLD NEW [noreplace|exchange|whiteout] | link OLD NEW | symlink TARGET PATH
utimens PATH ATIME MTIME        (each: now, omit, SEC or SEC.NSEC)
fsync [PATH] | fdatasync PATH | sync | drop-caches [1|2|3] | set-clock SEC[.NSEC] | umount | mount
same-mount OP                   (in a trace under the remount revert: OP runs
                                 in the mount of the op before it)`

// Parse reads one operation: protojson if it starts with '{', else the short form.
func Parse(s string) (*themisv1.Op, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		op := &themisv1.Op{}
		if err := (protojson.UnmarshalOptions{}).Unmarshal([]byte(s), op); err != nil {
			return nil, fmt.Errorf("opspec: protojson: %w", err)
		}
		if op.GetOp() == nil {
			return nil, fmt.Errorf("opspec: %q sets no operation", s)
		}
		return op, nil
	}
	f := strings.Fields(s)
	keep := len(f) > 0 && f[0] == SameMount
	if keep {
		f = f[1:]
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("opspec: empty operation")
	}
	p := &parser{name: f[0], args: f[1:]}
	op := p.parse()
	if p.err != nil {
		return nil, p.err
	}
	op.KeepMount = keep
	return op, nil
}

// SameMount is the short form's prefix of an op that runs in the mount of
// the op before it (Op.keep_mount): "same-mount write f 100 10 0xaa".
const SameMount = "same-mount"

type parser struct {
	name string
	args []string
	err  error
}

func (p *parser) fail(format string, a ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("opspec: %s: "+format+"\nusage:\n%s", append([]any{p.name}, append(a, Usage)...)...)
	}
}

// need checks the argument count is within [lo, hi].
func (p *parser) need(lo, hi int) bool {
	if len(p.args) < lo || len(p.args) > hi {
		if lo == hi {
			p.fail("want %d argument(s), got %d", lo, len(p.args))
		} else {
			p.fail("want %d to %d arguments, got %d", lo, hi, len(p.args))
		}
		return false
	}
	return true
}

func (p *parser) arg(i int) string {
	if i < len(p.args) {
		return p.args[i]
	}
	return ""
}

func (p *parser) int(i int, what string) int64 {
	v, err := strconv.ParseInt(p.arg(i), 0, 64)
	if err != nil {
		p.fail("%s %q: not an integer", what, p.arg(i))
	}
	return v
}

func (p *parser) mode(i int, def uint32) uint32 {
	if i >= len(p.args) {
		return def
	}
	v, err := strconv.ParseUint(p.arg(i), 8, 32)
	if err != nil || v > 0o7777 {
		p.fail("mode %q: want octal 0..7777", p.arg(i))
	}
	return uint32(v)
}

func (p *parser) flags(from int, allowed ...string) uint32 {
	var bits uint32
	for _, a := range p.args[min(from, len(p.args)):] {
		found := false
		for _, fn := range flagNames {
			if fn.name == a && contains(allowed, a) {
				bits |= fn.bit
				found = true
			}
		}
		if !found {
			p.fail("flag %q: want one of %s", a, strings.Join(allowed, ", "))
		}
	}
	return bits
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func (p *parser) timeValue(i int) *agentv1.TimeValue {
	switch a := p.arg(i); a {
	case "now":
		return &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_NOW}
	case "omit":
		return &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_OMIT}
	default:
		ts, err := ParseTime(a)
		if err != nil {
			p.fail("%v", err)
		}
		return &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_SET, Time: ts}
	}
}

// ParseTime reads SEC or SEC.NSEC (SEC may be negative).
func ParseTime(s string) (*agentv1.Timespec, error) {
	secPart, nsPart, hasNs := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secPart, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("time %q: want SEC or SEC.NSEC", s)
	}
	var ns int64
	if hasNs {
		if len(nsPart) == 0 || len(nsPart) > 9 {
			return nil, fmt.Errorf("time %q: want 1 to 9 digits of fraction", s)
		}
		ns, err = strconv.ParseInt(nsPart+strings.Repeat("0", 9-len(nsPart)), 10, 64)
		if err != nil || ns < 0 {
			return nil, fmt.Errorf("time %q: bad fraction", s)
		}
	}
	return &agentv1.Timespec{Sec: sec, Nsec: ns}, nil
}

// shortForm is one operation's short form: the bounds on its argument count
// and how to build the Op once the count is checked.
type shortForm struct {
	minArgs, maxArgs int
	build            func(p *parser) *themisv1.Op
}

// shortForms maps each short-form operation name to its form.
var shortForms = map[string]shortForm{
	"create": {1, 5, (*parser).create},
	"write":  {3, 7, (*parser).write},
	"truncate": {2, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Truncate{Truncate: &agentv1.Truncate{Path: p.arg(0), Length: p.int(1, "length")}}}
	}},
	"unlink": {1, 1, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Unlink{Unlink: &agentv1.Unlink{Path: p.arg(0)}}}
	}},
	"mkdir": {1, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Mkdir{Mkdir: &agentv1.Mkdir{Path: p.arg(0), Mode: p.mode(1, 0o755)}}}
	}},
	"rmdir": {1, 1, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Rmdir{Rmdir: &agentv1.Rmdir{Path: p.arg(0)}}}
	}},
	"chmod": {2, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Chmod{Chmod: &agentv1.Chmod{Path: p.arg(0), Mode: p.mode(1, 0)}}}
	}},
	"chown": {2, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Chown{Chown: &agentv1.Chown{Path: p.arg(0), Uid: p.int(1, "uid"), Gid: -1}}}
	}},
	"chgrp": {2, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Chown{Chown: &agentv1.Chown{Path: p.arg(0), Uid: -1, Gid: p.int(1, "gid")}}}
	}},
	"setxattr": {3, 4, (*parser).setxattr},
	"removexattr": {2, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Removexattr{Removexattr: &agentv1.Removexattr{Path: p.arg(0), Name: p.arg(1)}}}
	}},
	"rename": {2, 3, (*parser).rename},
	"link": {2, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Link{Link: &agentv1.Link{Path: p.arg(0), NewPath: p.arg(1)}}}
	}},
	"symlink": {2, 2, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Symlink{Symlink: &agentv1.Symlink{Target: p.arg(0), Path: p.arg(1)}}}
	}},
	"utimens": {3, 3, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Utimens{Utimens: &agentv1.Utimens{Path: p.arg(0), Atime: p.timeValue(1), Mtime: p.timeValue(2)}}}
	}},
	"fsync": {0, 1, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Fsync{Fsync: &agentv1.Fsync{Path: p.arg(0)}}}
	}},
	"fdatasync": {1, 1, func(p *parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Fsync{Fsync: &agentv1.Fsync{Path: p.arg(0), Datasync: true}}}
	}},
	"sync": {0, 0, func(*parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Sync{Sync: &agentv1.Sync{}}}
	}},
	"drop-caches": {0, 1, (*parser).dropCaches},
	"set-clock":   {1, 1, (*parser).setClock},
	"umount": {0, 0, func(*parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Umount{Umount: &agentv1.Umount{}}}
	}},
	"mount": {0, 0, func(*parser) *themisv1.Op {
		return &themisv1.Op{Op: &themisv1.Op_Mount{Mount: &agentv1.Mount{}}}
	}},
}

// parse builds the Op named by p.name from p.args, recording the first
// problem in p.err.
func (p *parser) parse() *themisv1.Op {
	form, ok := shortForms[p.name]
	if !ok {
		p.fail("unknown operation")
		return nil
	}
	if !p.need(form.minArgs, form.maxArgs) {
		return nil
	}
	return form.build(p)
}

// create reads "create PATH [MODE] [excl|trunc|direct]...".
func (p *parser) create() *themisv1.Op {
	mode, from := uint32(0o644), 1
	if len(p.args) > 1 && p.args[1][0] >= '0' && p.args[1][0] <= '7' {
		mode, from = p.mode(1, 0o644), 2
	}
	flags := oCreat | oWronly | p.flags(from, "excl", "trunc", "direct")
	return &themisv1.Op{Op: &themisv1.Op_Create{Create: &agentv1.Create{Path: p.arg(0), Mode: mode, Flags: flags}}}
}

// write reads "write PATH OFFSET SIZE [FILL] [append|sync|direct|creat]...".
func (p *parser) write() *themisv1.Op {
	w := &agentv1.Write{Path: p.arg(0), Offset: p.int(1, "offset"), Size: p.int(2, "size"), Fill: 0}
	from := 3
	if len(p.args) > 3 && strings.HasPrefix(p.args[3], "0x") || len(p.args) > 3 && p.args[3][0] >= '0' && p.args[3][0] <= '9' {
		v := p.int(3, "fill")
		if v < 0 || v > 255 {
			p.fail("fill %q: want a byte 0..0xff", p.arg(3))
		}
		w.Fill, from = uint32(v), 4
	}
	w.Flags = oRdwr | p.flags(from, "append", "sync", "direct", "creat")
	return &themisv1.Op{Op: &themisv1.Op_Write{Write: w}}
}

// setxattr reads "setxattr PATH NAME VALUE [create|replace]".
func (p *parser) setxattr() *themisv1.Op {
	var fl uint32
	switch p.arg(3) {
	case "":
	case "create":
		fl = 1
	case "replace":
		fl = 2
	default:
		p.fail("flag %q: want create or replace", p.arg(3))
	}
	return &themisv1.Op{Op: &themisv1.Op_Setxattr{Setxattr: &agentv1.Setxattr{Path: p.arg(0), Name: p.arg(1), Value: []byte(p.arg(2)), Flags: fl}}}
}

// renameFlags are renameat2's flags by their short-form word.
var renameFlags = []namedFlag{{"noreplace", 1}, {"exchange", 2}, {"whiteout", 4}}

// namedFlag is a flag bit and its short-form word.
type namedFlag struct {
	name string
	bit  uint32
}

// rename reads "rename OLD NEW [noreplace|exchange|whiteout]".
func (p *parser) rename() *themisv1.Op {
	var fl uint32
	if w := p.arg(2); w != "" {
		i := slices.IndexFunc(renameFlags, func(f namedFlag) bool { return f.name == w })
		if i < 0 {
			p.fail("flag %q: want noreplace, exchange or whiteout", w)
		} else {
			fl = renameFlags[i].bit
		}
	}
	return &themisv1.Op{Op: &themisv1.Op_Rename{Rename: &agentv1.Rename{Path: p.arg(0), NewPath: p.arg(1), Flags: fl}}}
}

// dropCaches reads "drop-caches [1|2|3]" (3 when omitted).
func (p *parser) dropCaches() *themisv1.Op {
	level := int64(3)
	if len(p.args) == 1 {
		level = p.int(0, "level")
	}
	if level < 1 || level > 3 {
		p.fail("level %d: want 1, 2 or 3", level)
	}
	return &themisv1.Op{Op: &themisv1.Op_DropCaches{DropCaches: &agentv1.DropCaches{Level: uint32(level)}}}
}

// setClock reads "set-clock SEC[.NSEC]".
func (p *parser) setClock() *themisv1.Op {
	ts, err := ParseTime(p.arg(0))
	if err != nil {
		p.fail("%v", err)
	}
	return &themisv1.Op{Op: &themisv1.Op_SetClock{SetClock: &agentv1.SetClock{Time: ts}}}
}

// ParseRequest reads one operation in the short form (Parse) and returns
// the agent request carrying it (Request).
func ParseRequest(s string) (*agentv1.Request, error) {
	op, err := Parse(s)
	if err != nil {
		return nil, err
	}
	return Request(op)
}

// Request turns an Op into the agent request carrying the same operation
// (lane fields left empty; the session fills them per lane).
func Request(op *themisv1.Op) (*agentv1.Request, error) {
	r := &agentv1.Request{KeepMount: op.GetKeepMount()}
	switch o := op.GetOp().(type) {
	case *themisv1.Op_Create:
		r.Op = &agentv1.Request_Create{Create: o.Create}
	case *themisv1.Op_Write:
		r.Op = &agentv1.Request_Write{Write: o.Write}
	case *themisv1.Op_Truncate:
		r.Op = &agentv1.Request_Truncate{Truncate: o.Truncate}
	case *themisv1.Op_Unlink:
		r.Op = &agentv1.Request_Unlink{Unlink: o.Unlink}
	case *themisv1.Op_Mkdir:
		r.Op = &agentv1.Request_Mkdir{Mkdir: o.Mkdir}
	case *themisv1.Op_Rmdir:
		r.Op = &agentv1.Request_Rmdir{Rmdir: o.Rmdir}
	case *themisv1.Op_Chmod:
		r.Op = &agentv1.Request_Chmod{Chmod: o.Chmod}
	case *themisv1.Op_Chown:
		r.Op = &agentv1.Request_Chown{Chown: o.Chown}
	case *themisv1.Op_Setxattr:
		r.Op = &agentv1.Request_Setxattr{Setxattr: o.Setxattr}
	case *themisv1.Op_Removexattr:
		r.Op = &agentv1.Request_Removexattr{Removexattr: o.Removexattr}
	case *themisv1.Op_Rename:
		r.Op = &agentv1.Request_Rename{Rename: o.Rename}
	case *themisv1.Op_Link:
		r.Op = &agentv1.Request_Link{Link: o.Link}
	case *themisv1.Op_Symlink:
		r.Op = &agentv1.Request_Symlink{Symlink: o.Symlink}
	case *themisv1.Op_Utimens:
		r.Op = &agentv1.Request_Utimens{Utimens: o.Utimens}
	case *themisv1.Op_Fsync:
		r.Op = &agentv1.Request_Fsync{Fsync: o.Fsync}
	case *themisv1.Op_Sync:
		r.Op = &agentv1.Request_Sync{Sync: o.Sync}
	case *themisv1.Op_DropCaches:
		r.Op = &agentv1.Request_DropCaches{DropCaches: o.DropCaches}
	case *themisv1.Op_SetClock:
		r.Op = &agentv1.Request_SetClock{SetClock: o.SetClock}
	case *themisv1.Op_Umount:
		r.Op = &agentv1.Request_Umount{Umount: o.Umount}
	case *themisv1.Op_Mount:
		r.Op = &agentv1.Request_Mount{Mount: o.Mount}
	default:
		return nil, fmt.Errorf("opspec: no operation set")
	}
	return r, nil
}

// FromRequest is the inverse of Request: the Op carried by an agent request
// (lane fields are kept as they are).
func FromRequest(r *agentv1.Request) (*themisv1.Op, error) {
	op := &themisv1.Op{KeepMount: r.GetKeepMount()}
	switch o := r.GetOp().(type) {
	case *agentv1.Request_Create:
		op.Op = &themisv1.Op_Create{Create: o.Create}
	case *agentv1.Request_Write:
		op.Op = &themisv1.Op_Write{Write: o.Write}
	case *agentv1.Request_Truncate:
		op.Op = &themisv1.Op_Truncate{Truncate: o.Truncate}
	case *agentv1.Request_Unlink:
		op.Op = &themisv1.Op_Unlink{Unlink: o.Unlink}
	case *agentv1.Request_Mkdir:
		op.Op = &themisv1.Op_Mkdir{Mkdir: o.Mkdir}
	case *agentv1.Request_Rmdir:
		op.Op = &themisv1.Op_Rmdir{Rmdir: o.Rmdir}
	case *agentv1.Request_Chmod:
		op.Op = &themisv1.Op_Chmod{Chmod: o.Chmod}
	case *agentv1.Request_Chown:
		op.Op = &themisv1.Op_Chown{Chown: o.Chown}
	case *agentv1.Request_Setxattr:
		op.Op = &themisv1.Op_Setxattr{Setxattr: o.Setxattr}
	case *agentv1.Request_Removexattr:
		op.Op = &themisv1.Op_Removexattr{Removexattr: o.Removexattr}
	case *agentv1.Request_Rename:
		op.Op = &themisv1.Op_Rename{Rename: o.Rename}
	case *agentv1.Request_Link:
		op.Op = &themisv1.Op_Link{Link: o.Link}
	case *agentv1.Request_Symlink:
		op.Op = &themisv1.Op_Symlink{Symlink: o.Symlink}
	case *agentv1.Request_Utimens:
		op.Op = &themisv1.Op_Utimens{Utimens: o.Utimens}
	case *agentv1.Request_Fsync:
		op.Op = &themisv1.Op_Fsync{Fsync: o.Fsync}
	case *agentv1.Request_Sync:
		op.Op = &themisv1.Op_Sync{Sync: o.Sync}
	case *agentv1.Request_DropCaches:
		op.Op = &themisv1.Op_DropCaches{DropCaches: o.DropCaches}
	case *agentv1.Request_SetClock:
		op.Op = &themisv1.Op_SetClock{SetClock: o.SetClock}
	case *agentv1.Request_Umount:
		op.Op = &themisv1.Op_Umount{Umount: o.Umount}
	case *agentv1.Request_Mount:
		op.Op = &themisv1.Op_Mount{Mount: o.Mount}
	default:
		return nil, fmt.Errorf("opspec: request %T is not a filesystem operation", r.GetOp())
	}
	return op, nil
}
