package explore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/zeebo/blake3"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/oracle"
)

// A toy in-memory filesystem, just enough of POSIX for the Metis op set, used
// as the lanes of a System without a VM. A lane can carry a planted bug.

type inode struct {
	kind   agentv1.Kind
	mode   uint32
	uid    uint32
	gid    uint32
	nlink  uint64 // regular files and symlinks; directories are computed
	data   []byte // never modified in place: replaced on every change
	hash   []byte // blake3 of data
	target string
	xattrs map[string]bool
	// cut are the bytes the last truncate down cut off (a "stale-tail"
	// lane shows them again when the file grows back over them).
	cut []byte
}

type toyFS struct {
	names map[string]*inode // path -> inode, root excluded
	bug   string
	// inMount counts the ops applied since the lane was last mounted (a
	// checkpoint, a restore, or the remount before an op that does not
	// share the mount of the op before: SharesMount). A "mount-chain" lane
	// gets a chmod wrong (other's execute bit flipped) when two ops or
	// more ran before it in one mount.
	inMount int
}

func newToyFS(bug string) *toyFS { return &toyFS{names: map[string]*inode{}, bug: bug} }

// clone copies the tree, keeping hard links shared within the copy.
func (fs *toyFS) clone() *toyFS {
	c := &toyFS{names: make(map[string]*inode, len(fs.names)), bug: fs.bug}
	m := map[*inode]*inode{}
	for p, n := range fs.names {
		d, ok := m[n]
		if !ok {
			cp := *n
			cp.xattrs = make(map[string]bool, len(n.xattrs))
			for k, v := range n.xattrs {
				cp.xattrs[k] = v
			}
			d = &cp
			m[n] = d
		}
		c.names[p] = d
	}
	return c
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// checkParent returns the errno of resolving p's parent.
func (fs *toyFS) checkParent(p string) int32 {
	for d := parentOf(p); d != ""; d = parentOf(d) {
		n, ok := fs.names[d]
		if !ok {
			return int32(syscall.ENOENT)
		}
		if n.kind != agentv1.Kind_KIND_DIRECTORY {
			return int32(syscall.ENOTDIR)
		}
	}
	return 0
}

func (fs *toyFS) lookup(p string) (*inode, int32) {
	if e := fs.checkParent(p); e != 0 {
		return nil, e
	}
	n, ok := fs.names[p]
	if !ok {
		return nil, int32(syscall.ENOENT)
	}
	return n, 0
}

func (fs *toyFS) children(p string) []string {
	var out []string
	for q := range fs.names {
		if parentOf(q) == p {
			out = append(out, q)
		}
	}
	return out
}

func (fs *toyFS) setData(n *inode, data []byte) {
	n.data = data
	h := blake3.Sum256(data)
	n.hash = h[:]
}

// grow is n's data resized to size: what it grows by is zeros, or on a
// "stale-tail" lane the bytes the last truncate down cut off.
func (fs *toyFS) grow(n *inode, size int64) []byte {
	out := resize(n.data, size)
	if fs.bug == "stale-tail" && size > int64(len(n.data)) {
		copy(out[len(n.data):], n.cut)
	}
	return out
}

func resize(data []byte, size int64) []byte {
	out := make([]byte, size)
	copy(out, data)
	return out
}

// Errnos the toy returns.
const (
	enoent    = int32(syscall.ENOENT)
	eexist    = int32(syscall.EEXIST)
	eisdir    = int32(syscall.EISDIR)
	enotdir   = int32(syscall.ENOTDIR)
	enotempty = int32(syscall.ENOTEMPTY)
	einval    = int32(syscall.EINVAL)
	efbig     = int32(syscall.EFBIG)
	eperm     = int32(syscall.EPERM)
	enodata   = int32(syscall.ENODATA)
	eoverflow = int32(syscall.EOVERFLOW)
)

// toyHashCap is how many colliding names a "hash-cap" lane's root holds
// (stock btrfs's 4 KiB leaf holds 17 of the burst's names).
const toyHashCap = 17

// apply runs one op and returns its errno.
func (fs *toyFS) apply(op *agentv1.Request) int32 {
	switch o := op.GetOp().(type) {
	case *agentv1.Request_Create, *agentv1.Request_Write, *agentv1.Request_Truncate:
		return fs.applyData(op)
	case *agentv1.Request_Unlink, *agentv1.Request_Mkdir, *agentv1.Request_Rmdir, *agentv1.Request_Link, *agentv1.Request_Symlink:
		return fs.applyNames(op)
	case *agentv1.Request_Rename:
		return fs.rename(o)
	default:
		return fs.applyAttrs(op)
	}
}

// colliding counts the names of CollidingNames the toy holds.
func (fs *toyFS) colliding() int {
	n := 0
	for p := range fs.names {
		if IsColliding(p) {
			n++
		}
	}
	return n
}

// toyMaxFile is the toy filesystem's file size limit (far writes and
// truncates pass it: EFBIG).
const toyMaxFile = 1 << 20

// applyData runs create, write and truncate.
func (fs *toyFS) applyData(op *agentv1.Request) int32 {
	switch o := op.GetOp().(type) {
	case *agentv1.Request_Create:
		c := o.Create
		if e := fs.checkParent(c.Path); e != 0 {
			return e
		}
		if fs.bug == "hash-cap" && IsColliding(c.Path) && fs.colliding() >= toyHashCap {
			return eoverflow
		}
		if n, ok := fs.names[c.Path]; ok {
			switch {
			case c.Flags&oExcl != 0:
				return eexist
			case n.kind == agentv1.Kind_KIND_DIRECTORY:
				return eisdir
			case c.Flags&oTrunc != 0:
				fs.setData(n, nil)
			}
			return 0
		}
		n := &inode{kind: agentv1.Kind_KIND_REGULAR, mode: c.Mode, nlink: 1, xattrs: map[string]bool{}}
		fs.setData(n, nil)
		fs.names[c.Path] = n
	case *agentv1.Request_Write:
		w := o.Write
		n, e := fs.lookup(w.Path)
		if e == enoent && w.Flags&oCreat != 0 {
			if e = fs.checkParent(w.Path); e != 0 {
				return e
			}
			n = &inode{kind: agentv1.Kind_KIND_REGULAR, mode: 0o644, nlink: 1, xattrs: map[string]bool{}}
			fs.setData(n, nil)
			fs.names[w.Path] = n
			e = 0
		}
		if e != 0 {
			return e
		}
		if n.kind == agentv1.Kind_KIND_DIRECTORY {
			return eisdir
		}
		off := w.Offset
		if w.Flags&oAppend != 0 {
			off = int64(len(n.data))
		}
		if off+w.Size > toyMaxFile {
			return efbig
		}
		data := fs.grow(n, max(int64(len(n.data)), off+w.Size))
		for i := off; i < off+w.Size; i++ {
			data[i] = byte(w.Fill)
		}
		fs.setData(n, data)
	case *agentv1.Request_Truncate:
		t := o.Truncate
		n, e := fs.lookup(t.Path)
		if e != 0 {
			return e
		}
		if n.kind == agentv1.Kind_KIND_DIRECTORY {
			return eisdir
		}
		length := t.Length
		if length > toyMaxFile {
			return efbig
		}
		if fs.bug == "truncate-cap" && length > 65536 {
			length = 65536
		}
		if length < int64(len(n.data)) {
			n.cut = n.data[length:]
		}
		fs.setData(n, fs.grow(n, length))
	default:
		return einval
	}
	return 0
}

// applyNames runs unlink, mkdir, rmdir, link and symlink.
func (fs *toyFS) applyNames(op *agentv1.Request) int32 {
	switch o := op.GetOp().(type) {
	case *agentv1.Request_Unlink:
		n, e := fs.lookup(o.Unlink.Path)
		if e != 0 {
			return e
		}
		if n.kind == agentv1.Kind_KIND_DIRECTORY {
			return eisdir
		}
		n.nlink--
		delete(fs.names, o.Unlink.Path)
	case *agentv1.Request_Mkdir:
		m := o.Mkdir
		if e := fs.checkParent(m.Path); e != 0 {
			return e
		}
		if _, ok := fs.names[m.Path]; ok {
			return eexist
		}
		fs.names[m.Path] = &inode{kind: agentv1.Kind_KIND_DIRECTORY, mode: m.Mode, xattrs: map[string]bool{}}
	case *agentv1.Request_Rmdir:
		n, e := fs.lookup(o.Rmdir.Path)
		if e != 0 {
			return e
		}
		if n.kind != agentv1.Kind_KIND_DIRECTORY {
			return enotdir
		}
		if len(fs.children(o.Rmdir.Path)) > 0 {
			if fs.bug != "rmdir-nonempty" {
				return enotempty
			}
			for _, q := range slices.Collect(func(yield func(string) bool) {
				for q := range fs.names {
					if strings.HasPrefix(q, o.Rmdir.Path+"/") && !yield(q) {
						return
					}
				}
			}) {
				delete(fs.names, q)
			}
		}
		delete(fs.names, o.Rmdir.Path)
	case *agentv1.Request_Link:
		n, e := fs.lookup(o.Link.Path)
		if e != 0 {
			return e
		}
		if e := fs.checkParent(o.Link.NewPath); e != 0 {
			return e
		}
		if n.kind == agentv1.Kind_KIND_DIRECTORY {
			return eperm
		}
		if _, ok := fs.names[o.Link.NewPath]; ok {
			return eexist
		}
		if fs.bug != "link-nlink" {
			n.nlink++
		}
		fs.names[o.Link.NewPath] = n
	case *agentv1.Request_Symlink:
		s := o.Symlink
		if e := fs.checkParent(s.Path); e != 0 {
			return e
		}
		if _, ok := fs.names[s.Path]; ok {
			return eexist
		}
		fs.names[s.Path] = &inode{kind: agentv1.Kind_KIND_SYMLINK, mode: 0o777, nlink: 1, target: s.Target, xattrs: map[string]bool{}}
	default:
		return einval
	}
	return 0
}

// rename runs a rename.
func (fs *toyFS) rename(o *agentv1.Request_Rename) int32 {
	src, dst := o.Rename.Path, o.Rename.NewPath
	n, e := fs.lookup(src)
	if e != 0 {
		return e
	}
	if e := fs.checkParent(dst); e != 0 {
		return e
	}
	if src == dst {
		return 0
	}
	isDir := n.kind == agentv1.Kind_KIND_DIRECTORY
	if isDir && strings.HasPrefix(dst, src+"/") {
		return einval
	}
	if d, ok := fs.names[dst]; ok {
		dDir := d.kind == agentv1.Kind_KIND_DIRECTORY
		switch {
		case d == n:
			return 0 // hard links to the same inode: rename does nothing
		case isDir && !dDir:
			return enotdir
		case !isDir && dDir:
			return eisdir
		case dDir && len(fs.children(dst)) > 0:
			return enotempty
		}
		if !dDir {
			d.nlink--
		}
		delete(fs.names, dst)
	}
	moved := map[string]*inode{}
	for q, m := range fs.names {
		if q == src || strings.HasPrefix(q, src+"/") {
			moved[dst+strings.TrimPrefix(q, src)] = m
			delete(fs.names, q)
		}
	}
	for q, m := range moved {
		fs.names[q] = m
	}
	return 0
}

// applyAttrs runs chmod, chown, setxattr, removexattr, fsync and sync.
func (fs *toyFS) applyAttrs(op *agentv1.Request) int32 {
	switch o := op.GetOp().(type) {
	case *agentv1.Request_Chmod:
		n, e := fs.lookup(o.Chmod.Path)
		if e != 0 {
			return e
		}
		n.mode = o.Chmod.Mode
		if fs.bug == "mount-chain" && fs.inMount >= 2 {
			n.mode ^= 0o001
		}
	case *agentv1.Request_Chown:
		n, e := fs.lookup(o.Chown.Path)
		if e != 0 {
			return e
		}
		if o.Chown.Uid >= 0 {
			n.uid = uint32(o.Chown.Uid)
		}
		if o.Chown.Gid >= 0 {
			n.gid = uint32(o.Chown.Gid)
		}
	case *agentv1.Request_Setxattr:
		n, e := fs.lookup(o.Setxattr.Path)
		if e != 0 {
			return e
		}
		if o.Setxattr.Flags&xattrCreate != 0 && n.xattrs[o.Setxattr.Name] {
			return eexist
		}
		n.xattrs[o.Setxattr.Name] = true
	case *agentv1.Request_Removexattr:
		n, e := fs.lookup(o.Removexattr.Path)
		if e != 0 {
			return e
		}
		if !n.xattrs[o.Removexattr.Name] {
			return enodata
		}
		delete(n.xattrs, o.Removexattr.Name)
	case *agentv1.Request_Fsync:
		// Nothing in memory to persist: the path must resolve, that is all
		// (the empty path is the lane: syncfs). The toy follows no
		// symlink, here as in every op.
		if o.Fsync.Path != "" {
			if _, e := fs.lookup(o.Fsync.Path); e != 0 {
				return e
			}
		}
	case *agentv1.Request_Sync:
	default:
		return einval
	}
	return 0
}

func (fs *toyFS) entries() []*agentv1.Entry {
	subdirs := func(p string) uint64 {
		n := uint64(2)
		for _, q := range fs.children(p) {
			if fs.names[q].kind == agentv1.Kind_KIND_DIRECTORY {
				n++
			}
		}
		return n
	}
	out := []*agentv1.Entry{{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: subdirs("")}}
	paths := make([]string, 0, len(fs.names))
	for p := range fs.names {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		n := fs.names[p]
		e := &agentv1.Entry{Path: p, Kind: n.kind, Mode: n.mode, Uid: n.uid, Gid: n.gid, Nlink: n.nlink}
		switch n.kind {
		case agentv1.Kind_KIND_DIRECTORY:
			e.Nlink = subdirs(p)
		case agentv1.Kind_KIND_REGULAR:
			e.Size, e.ContentHash = int64(len(n.data)), n.hash
		case agentv1.Kind_KIND_SYMLINK:
			e.Size, e.SymlinkTarget = int64(len(n.target)), n.target
		}
		out = append(out, e)
	}
	return out
}

// toySystem runs every op on each of its lanes and enforces the checkpoint
// stack discipline the Checker promises.
type toySystem struct {
	names  []string
	lanes  []*toyFS
	stack  []toyCheckpoint
	nextID int

	applies, restores int
	fresh             bool     // the lanes mounted since the last Apply
	log               []string // "apply <op>" and "fp <roots>" lines, for determinism tests
	record            bool
}

type toyCheckpoint struct {
	id    CheckpointID
	lanes []*toyFS
}

// newToy makes a System with one lane per bug ("" is a correct lane).
func newToy(bugs ...string) *toySystem {
	s := &toySystem{}
	for i, b := range bugs {
		s.names = append(s.names, fmt.Sprintf("lane%d", i))
		s.lanes = append(s.lanes, newToyFS(b))
	}
	return s
}

func (s *toySystem) Checkpoint(ctx context.Context) (CheckpointID, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.nextID++
	cp := toyCheckpoint{id: fmt.Sprintf("cp%d", s.nextID)}
	for _, l := range s.lanes {
		cp.lanes = append(cp.lanes, l.clone())
	}
	s.stack = append(s.stack, cp)
	s.remount()
	return cp.id, nil
}

// remount models the remount revert's umount+mount of every lane: what a
// lane keeps in memory is gone.
func (s *toySystem) remount() {
	for _, l := range s.lanes {
		l.inMount = 0
	}
	s.fresh = true
}

func (s *toySystem) top(op string, id CheckpointID) (toyCheckpoint, error) {
	if len(s.stack) == 0 || s.stack[len(s.stack)-1].id != id {
		var ids []string
		for _, c := range s.stack {
			ids = append(ids, c.id)
		}
		return toyCheckpoint{}, fmt.Errorf("toy: %s %s: not the top of the checkpoint stack %v", op, id, ids)
	}
	return s.stack[len(s.stack)-1], nil
}

func (s *toySystem) Restore(ctx context.Context, id CheckpointID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cp, err := s.top("restore", id)
	if err != nil {
		return err
	}
	s.restores++
	for i, l := range cp.lanes {
		s.lanes[i] = l.clone()
	}
	s.remount()
	return nil
}

func (s *toySystem) Drop(ctx context.Context, id CheckpointID) error {
	if _, err := s.top("drop", id); err != nil {
		return err
	}
	s.stack = s.stack[:len(s.stack)-1]
	return nil
}

func (s *toySystem) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.applies++
	if s.record {
		s.log = append(s.log, "apply "+op.String())
	}
	if !s.fresh && !SharesMount(op) {
		s.remount()
	}
	s.fresh = false
	out := make([]LaneResult, len(s.lanes))
	for i, l := range s.lanes {
		out[i] = LaneResult{Lane: s.names[i], Errno: l.apply(op)}
		l.inMount++
	}
	return out, nil
}

func (s *toySystem) Fingerprint(ctx context.Context) ([]LaneState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]LaneState, len(s.lanes))
	for i, l := range s.lanes {
		r := oracle.Fold(l.entries(), agentv1.TimeMode_TIME_MODE_NONE)
		out[i] = LaneState{Lane: s.names[i], Root: r[:]}
	}
	if s.record {
		s.log = append(s.log, fmt.Sprintf("fp %x", stateKey(out)))
	}
	return out, nil
}

func (s *toySystem) Leaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	for i, n := range s.names {
		if n == lane {
			return s.lanes[i].entries(), nil
		}
	}
	return nil, fmt.Errorf("toy: no lane %q", lane)
}

// mustCheck runs a search of sys under cfg, failing the test on an error.
func mustCheck(t *testing.T, sys System, cfg Config) *Result {
	t.Helper()
	c, err := NewChecker(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}
