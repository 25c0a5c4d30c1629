package explore

import (
	"hash/crc32"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// OpCollide is the burst op kind: it fills one directory with names whose
// btrfs name hash (crc32c, seed ~1) is one value, CollideFill creates,
// then makes one more such name by a create, mkdir, rename, link or
// symlink (drawn). btrfs keeps every name of one hash in one item of a
// leaf: past what the item can hold (about 17 of these 200-byte names in
// a 4 KiB leaf) it must refuse the name with EOVERFLOW before changing
// anything (CVE-2012-5374; the 2026 create fix). On other filesystems the
// burst is many long names in one directory. A burst is one op of the
// search (one step, one depth) and CollideFill+1 ops of the trace: its
// Request is a Batch that the search expands (Steps); traces, replays and
// reproducers hold the plain ops. Off by default; check turns it on.
const OpCollide = "collide"

// CollideFill is how many colliding names a burst creates before its last
// op: more than a 4 KiB btrfs leaf's item holds (the --mixed lane's).
const CollideFill = 24

// collideLen is the length of a colliding name, under every lane's name
// limit but minix's (60).
const collideLen = 200

// collideChars are the bytes of a colliding name: one case, so that no two
// names are one on a case-insensitive filesystem (vfat, exfat).
const collideChars = "abcdefghijklmnopqrstuvwxyz0123456789-_"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BtrfsNameHash is btrfs_name_hash: the kernel's crc32c (no final
// inversion) of name with the seed ~1.
func BtrfsNameHash(name string) uint32 {
	return ^crc32.Update(1, castagnoli, []byte(name))
}

// CollidingNames are the CollideFill+1 names a burst uses, each
// collideLen bytes of collideChars, all with one BtrfsNameHash. They are
// made once, by a fixed seed.
var CollidingNames = sync.OnceValue(collidingNames)

var collidingSet = sync.OnceValue(func() map[string]bool {
	set := map[string]bool{}
	for _, n := range CollidingNames() {
		set[n] = true
	}
	return set
})

// IsColliding reports whether the last component of p is one of
// CollidingNames.
func IsColliding(p string) bool {
	return len(p) >= collideLen && collidingSet()[path.Base(p)]
}

func collidingNames() []string {
	rng := rand.New(rand.NewPCG(0x7468656d, 0x6973))
	prefix := func() []byte {
		b := make([]byte, collideLen-4)
		for i := range b {
			b[i] = collideChars[rng.IntN(len(collideChars))]
		}
		return b
	}
	first := string(prefix()) + "aaaa"
	target := BtrfsNameHash(first)
	names := []string{first}
	for len(names) < CollideFill+1 {
		p := prefix()
		tail := forgeCRC(^crc32.Update(1, castagnoli, p), target)
		if !allIn(tail[:], collideChars) {
			continue // about 1 in 2000 prefixes gives printable bytes
		}
		names = append(names, string(p)+string(tail[:]))
	}
	return names
}

// forgeCRC returns the 4 bytes that take the crc32c register (reflected,
// no inversion) from state to target: each byte's table entry is found
// from the top byte of what is left of target, as the register shifts the
// state out entirely in 4 bytes.
func forgeCRC(state, target uint32) [4]byte {
	var idx [4]byte
	c := target
	for i := 3; i >= 0; i-- {
		j := topIndex()[c>>24]
		idx[i] = j
		c = (c ^ castagnoli[j]) << 8
	}
	var out [4]byte
	for i := range out {
		out[i] = byte(state) ^ idx[i]
		state = castagnoli[idx[i]] ^ state>>8
	}
	return out
}

// topIndex maps a table entry's top byte to its index (unique for a CRC
// table).
var topIndex = sync.OnceValue(func() [256]byte {
	var t [256]byte
	for i, v := range castagnoli {
		t[v>>24] = byte(i)
	}
	return t
})

func allIn(b []byte, set string) bool {
	for _, x := range b {
		if strings.IndexByte(set, x) < 0 {
			return false
		}
	}
	return true
}

// BurstContinues reports whether op is an op of a collide burst after its
// first (the first creates CollidingNames()[0]). Under the remount revert
// the lanes are remounted before every op but these: a burst runs on the
// lanes as its first op found them (25 remounts made a burst some 12 times
// dearer). Search, replay and reproducers apply the same rule to the flat
// trace.
func BurstContinues(op *agentv1.Request) bool {
	if !collides(op) {
		return false
	}
	c, ok := op.GetOp().(*agentv1.Request_Create)
	return !ok || path.Base(c.Create.GetPath()) != CollidingNames()[0]
}

// SharesMount reports whether, under the remount revert, op runs in the
// mount of the op before it, with no remount first: an op marked so
// (Request.keep_mount: a regrow's grow after its append, for one) or a
// collide burst's op after its first (BurstContinues). Search, replay,
// minimization and reproducers apply it to the flat trace.
func SharesMount(op *agentv1.Request) bool {
	return op.GetKeepMount() || BurstContinues(op)
}

// WalkedBefore reports whether the op at index i of a flat trace met the
// lanes as a walk left them: the search fingerprints the lanes after every
// op it applies (each op of a burst, each setup op), in that op's own
// mount, and the walk looks up every entry and reads every file. So every
// op but the first came after a walk, then after a remount where the trace
// remounts (SharesMount says where it does not). What the walk leaves in
// memory (a looked-up inode's copy of its directory, say) is part of what
// the next op meets in the same mount, so replays and reproducers walk
// there too.
func WalkedBefore(i int) bool { return i > 0 }

// collides reports whether op makes one of CollidingNames (a burst's op).
func collides(op *agentv1.Request) bool {
	switch o := op.GetOp().(type) {
	case *agentv1.Request_Create:
		return IsColliding(o.Create.GetPath())
	case *agentv1.Request_Mkdir:
		return IsColliding(o.Mkdir.GetPath())
	case *agentv1.Request_Rename:
		return IsColliding(o.Rename.GetNewPath())
	case *agentv1.Request_Link:
		return IsColliding(o.Link.GetNewPath())
	case *agentv1.Request_Symlink:
		return IsColliding(o.Symlink.GetPath())
	}
	return false
}

// Steps are the ops one search step runs: a burst's (a Batch) in order,
// else op itself.
func Steps(op *agentv1.Request) []*agentv1.Request {
	if b, ok := op.GetOp().(*agentv1.Request_Batch); ok {
		return b.Batch.GetRequests()
	}
	return []*agentv1.Request{op}
}

// appendStep is trace followed by op's Steps, sharing nothing with trace's
// spare capacity.
func appendStep(trace []*agentv1.Request, op *agentv1.Request) []*agentv1.Request {
	out := make([]*agentv1.Request, 0, len(trace)+len(Steps(op)))
	return append(append(out, trace...), Steps(op)...)
}

// buildCollide draws a burst in dir ("" the root): the CollideFill
// creates, then the last name made as kind (create, mkdir, rename, link
// or symlink) from the pool file file.
func buildCollide(dir, kind, file string, mode uint32) *agentv1.Request {
	names := CollidingNames()
	at := func(n string) string { return path.Join(dir, n) }
	ops := make([]*agentv1.Request, 0, CollideFill+1)
	for _, n := range names[:CollideFill] {
		ops = append(ops, &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{
			Path: at(n), Flags: oCreat | oWronly, Mode: 0o644}}})
	}
	last := at(names[CollideFill])
	r := &agentv1.Request{}
	switch kind {
	case OpMkdir:
		r.Op = &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: last, Mode: mode}}
	case OpRename:
		r.Op = &agentv1.Request_Rename{Rename: &agentv1.Rename{Path: file, NewPath: last}}
	case OpLink:
		r.Op = &agentv1.Request_Link{Link: &agentv1.Link{Path: file, NewPath: last}}
	case OpSymlink:
		r.Op = &agentv1.Request_Symlink{Symlink: &agentv1.Symlink{Target: file, Path: last}}
	default:
		r.Op = &agentv1.Request_Create{Create: &agentv1.Create{Path: last, Flags: oCreat | oWronly, Mode: mode}}
	}
	ops = append(ops, r)
	return &agentv1.Request{Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: ops}}}
}

// collideLast are the kinds of a burst's last op.
var collideLast = []string{OpCreateFile, OpMkdir, OpRename, OpLink, OpSymlink}

// collideLastKinds are the kinds a burst's last op may take in a run whose
// enabled kinds are kinds: a create always; mkdir, and with pool files
// rename, link and symlink, where the run enables them. A kind the family
// table leaves out of the run (vfat's and exfat's link and symlink) is
// not enabled, so no burst ends in it either.
func collideLastKinds(kinds []string, files bool) []string {
	out := []string{OpCreateFile}
	for _, k := range collideLast[1:] {
		if slices.Contains(kinds, k) && (files || k == OpMkdir) {
			out = append(out, k)
		}
	}
	return out
}
