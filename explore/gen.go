package explore

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Op kinds of the Metis operation set (FAST'24), the names Config.Ops and
// Config.Weights use.
const (
	OpCreateFile  = "create_file"
	OpWriteFile   = "write_file"
	OpTruncate    = "truncate"
	OpUnlink      = "unlink"
	OpMkdir       = "mkdir"
	OpRmdir       = "rmdir"
	OpChmod       = "chmod"
	OpChown       = "chown"
	OpChgrp       = "chgrp"
	OpSetxattr    = "setxattr"
	OpRemovexattr = "removexattr"
	OpRename      = "rename"
	OpLink        = "link"
	OpSymlink     = "symlink"
)

// Persistence op kinds: they move data and metadata to the disk and change
// nothing a fingerprint reads. Not in MetisOps: on the disk state alone,
// without crash states, they cost time and show nothing; enable them in
// Config.Ops.
const (
	// OpFsync is fsync(2) of a pool path (a file, or with 1-FileBias a dir).
	OpFsync = "fsync"
	// OpFdatasync is fdatasync(2) of a pool path.
	OpFdatasync = "fdatasync"
	// OpSync is sync(2): machine-wide, the session runs it once for all
	// lanes.
	OpSync = "sync"
)

// renameat2(2) op kinds: rename with one of its flags. Not in MetisOps
// (Metis has plain rename only); the set OpSetRenameFlags enables them, and
// themisctl check does.
const (
	// OpRenameNoreplace is RENAME_NOREPLACE: EEXIST where the target is.
	OpRenameNoreplace = "rename_noreplace"
	// OpRenameExchange is RENAME_EXCHANGE: both paths must exist and swap.
	OpRenameExchange = "rename_exchange"
	// OpRenameWhiteout is RENAME_WHITEOUT: a whiteout (a 0/0 character
	// device) is left where the source was.
	OpRenameWhiteout = "rename_whiteout"
)

// Linux renameat2 flags.
const (
	renameNoreplace = 1 << 0
	renameExchange  = 1 << 1
	renameWhiteout  = 1 << 2
)

// RenameFlagOps are the renameat2 op kinds.
var RenameFlagOps = []string{OpRenameNoreplace, OpRenameExchange, OpRenameWhiteout}

// Far op kinds: a write or truncate at a file size limit (FarLengths). Not
// in MetisOps (Metis's lengths are small); the set OpSetFar enables them,
// and themisctl check does. Every filesystem's limit is its own, so a
// differential run of two filesystems leaves them out (the family table
// says so); they are for runs of one lane.
const (
	// OpWriteFar is a write_file whose offset is a FarLengths value,
	// with O_CREAT.
	OpWriteFar = "write_far"
	// OpTruncateFar is a truncate to a FarLengths value.
	OpTruncateFar = "truncate_far"
)

// FarOps are the far op kinds.
var FarOps = []string{OpWriteFar, OpTruncateFar}

// farFloor is where far lengths begin (the least, 2^31 - 4096): above
// the largest small length (GenConfig.MaxLength is at most 1<<30, its
// largest bin 1<<30 + 1), so OpKind tells a far write or truncate from a
// small one by its offset or length alone.
const farFloor = 1<<31 - 4096

// FarLengths are the far offsets and truncate lengths: around each size
// limit filesystems have, the limit less a 4 KiB block, less a 1 KiB
// block, less a byte, the limit and a byte past it. The limits: 2^31 and
// 2^32 bytes (signed and unsigned 32-bit sizes: FAT's 4 GiB), 2^41 to 2^44
// (2^32 blocks of 512 B to 4 KiB: ext4's extent files, UDF's 4 TiB cap)
// and 2^63 (MAX_LFS_FILESIZE, with nothing past it), ascending.
var FarLengths = farLengths()

func farLengths() []int64 {
	var out []int64
	for _, shift := range []uint{31, 32, 41, 42, 43, 44} {
		p := int64(1) << shift
		out = append(out, p-4096, p-1024, p-1, p, p+1)
	}
	const maxLFS = int64(^uint64(0) >> 1)
	return append(out, maxLFS-4096, maxLFS-1024, maxLFS)
}

// MetisOps is the default op set: all fourteen Metis operations.
var MetisOps = []string{
	OpCreateFile, OpWriteFile, OpTruncate, OpUnlink, OpMkdir, OpRmdir, OpChmod,
	OpChown, OpChgrp, OpSetxattr, OpRemovexattr, OpRename, OpLink, OpSymlink,
}

// PersistenceOps are the persistence op kinds, off by default.
var PersistenceOps = []string{OpFsync, OpFdatasync, OpSync}

// AllOps is every op kind the Metis generator knows.
var AllOps = slices.Concat(MetisOps, PersistenceOps, RenameFlagOps, FarOps, []string{OpCollide, OpRegrow})

// Names of op sets Config.Ops accepts in place of the kinds they hold.
const (
	// OpSetMetis stands for MetisOps.
	OpSetMetis = "metis"
	// OpSetPersistence stands for PersistenceOps.
	OpSetPersistence = "persistence"
	// OpSetRenameFlags stands for RenameFlagOps.
	OpSetRenameFlags = "rename-flags"
	// OpSetFar stands for FarOps.
	OpSetFar = "far"
)

// expandOps replaces op set names in ops by their kinds.
func expandOps(ops []string) []string {
	var out []string
	for _, k := range ops {
		switch k {
		case OpSetMetis:
			out = append(out, MetisOps...)
		case OpSetPersistence:
			out = append(out, PersistenceOps...)
		case OpSetRenameFlags:
			out = append(out, RenameFlagOps...)
		case OpSetFar:
			out = append(out, FarOps...)
		default:
			out = append(out, k)
		}
	}
	return out
}

// Linux flag values used by the generated ops.
const (
	oWronly = 0o1
	oRdwr   = 0o2
	oCreat  = 0o100
	oExcl   = 0o200
	oTrunc  = 0o1000
	oAppend = 0o2000
	oSync   = 0o4010000
	oDirect = 0o40000

	xattrCreate = 1
)

// Argument bins (Metis).
var (
	// Modes for create, mkdir and chmod.
	Modes = []uint32{0o600, 0o640, 0o644, 0o755, 0o777}
	// Fills are the bytes a write repeats.
	Fills = []uint32{0x00, 0xff, 0x55}
	// IDs are the uid and gid values chown and chgrp use.
	IDs = []int64{0, 1000}
	// XattrNames are the two fixed names setxattr and removexattr use.
	XattrNames = []string{"user.themis0", "user.themis1"}
	// XattrValue is the value setxattr writes.
	XattrValue = []byte("themis")
)

// DefaultMaxLength caps write offsets, write sizes and truncate lengths
// (the largest bin is DefaultMaxLength+1).
const DefaultMaxLength = 65536

// Lengths returns the length bins up to max: 0 and every power of two p <=
// max together with p-1 and p+1, ascending.
func Lengths(max int64) []int64 {
	seen := map[int64]bool{0: true}
	out := []int64{0}
	for p := int64(1); p > 0 && p <= max; p <<= 1 {
		for _, v := range []int64{p - 1, p, p + 1} {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// PathPool is the set of names ops draw from (Metis: 3 files, 2 dirs,
// depth 2). Level 1 holds files f-00.. and dirs d-00..; every dir of a level
// below Depth holds the same names again.
type PathPool struct {
	// Files per directory level (f-00, f-01, ...).
	Files int
	// Dirs per directory level (d-00, d-01, ...).
	Dirs int
	// Depth is the number of path components of the deepest pool path.
	Depth int
	// FileBias is the probability that an op taking any kind of path takes
	// a file (Metis: 0.95). 0 means the default.
	FileBias float64
}

// DefaultPool is Metis' pool.
var DefaultPool = PathPool{Files: 3, Dirs: 2, Depth: 2, FileBias: 0.95}

// maxPoolPaths bounds the number of paths a pool may name.
const maxPoolPaths = 10000

func (p PathPool) validate() error {
	switch {
	case p.Files < 0 || p.Files > 100:
		return fmt.Errorf("explore: pool files %d: want 0..100", p.Files)
	case p.Dirs < 0 || p.Dirs > 100:
		return fmt.Errorf("explore: pool dirs %d: want 0..100", p.Dirs)
	case p.Files+p.Dirs == 0:
		return fmt.Errorf("explore: pool has no files and no dirs")
	case p.Depth < 1 || p.Depth > 4:
		return fmt.Errorf("explore: pool depth %d: want 1..4", p.Depth)
	case p.FileBias < 0 || p.FileBias > 1 || p.FileBias != p.FileBias:
		return fmt.Errorf("explore: pool file bias %v: want 0..1", p.FileBias)
	}
	n, level := 0, 1
	for d := 1; d <= p.Depth; d++ {
		n += level * (p.Files + p.Dirs)
		level *= p.Dirs
		if n > maxPoolPaths || level > maxPoolPaths {
			return fmt.Errorf("explore: pool of %d files, %d dirs, depth %d names more than %d paths", p.Files, p.Dirs, p.Depth, maxPoolPaths)
		}
	}
	return nil
}

// Paths lists the pool's files and dirs, each in breadth-first order.
func (p PathPool) Paths() (files, dirs []string) {
	parents := []string{""}
	for d := 1; d <= p.Depth; d++ {
		var next []string
		for _, parent := range parents {
			prefix := ""
			if parent != "" {
				prefix = parent + "/"
			}
			for i := 0; i < p.Files; i++ {
				files = append(files, fmt.Sprintf("%sf-%02d", prefix, i))
			}
			for i := 0; i < p.Dirs; i++ {
				next = append(next, fmt.Sprintf("%sd-%02d", prefix, i))
			}
		}
		dirs = append(dirs, next...)
		parents = next
	}
	return files, dirs
}

// Generator proposes the ops tried at one state.
type Generator interface {
	// Draw returns the distinct ops to try, n of them as a rule (fewer when
	// the op space is smaller; a generator that guarantees some ops, as
	// MetisGenerator guarantees one of every enabled kind, may return
	// more), using only rng for randomness so that the same stream gives
	// the same ops. The Checker tries every op returned, in order.
	Draw(rng *rand.Rand, n int) []*agentv1.Request
}

// StateAwareGenerator is a Generator that can also draw knowing the entries
// of the current state (the first lane's leaves). The Checker prefers it.
type StateAwareGenerator interface {
	Generator
	DrawAt(rng *rand.Rand, n int, state []*agentv1.Entry) []*agentv1.Request
}

// existingBias is the probability that a state-aware extra draw (one
// after every kind has had its op) takes a path that fits the state (an
// existing object for ops that need one, a path whose parent exists for ops
// that create); the rest are drawn from the whole pool so that error paths
// (ENOENT, EEXIST, ENOTDIR, ...) stay explored. The op every kind gets at
// every state takes a fitting path whenever the state has one: with the
// 0.8 of the extra draws there too, an empty root could try every kind and
// change nothing (toy filesystem, default run, 1 seed in 250).
const existingBias = 0.8

// MetisGenerator draws ops from the Metis op set with its argument bins.
// At every state it tries every enabled kind once, in an order drawn from
// the state's rng, each with its arguments drawn from the bins (in DrawAt
// on a path that fits the state where one does); then it adds weighted
// draws until it holds n distinct ops. A Draw of n ops below the number of
// enabled kinds still returns one of every kind: the effective branching
// is max(n, kinds).
type MetisGenerator struct {
	files, dirs []string
	// Set for the duration of a DrawAt: pool paths that exist as files
	// (anything not a directory) or dirs, and pool paths whose parent exists.
	exFiles, exDirs, newFiles, newDirs []string
	// fitAll is set while the ops every kind gets are built: a path that
	// fits is taken whenever there is one.
	fitAll  bool
	bias    float64
	kinds   []string
	cum     []float64 // cumulative weights, parallel to kinds
	lengths []int64
	direct  bool
	// collideLast are the kinds a burst's last op may take (OpCollide).
	collideLast []string
	// root is the first state DrawAt saw (rootState); changed, for the
	// duration of a DrawAt, the paths changed since it (persistPath).
	root    map[string]*agentv1.Entry
	changed []string
}

// GenConfig configures a MetisGenerator; zero fields take the defaults.
type GenConfig struct {
	Pool PathPool
	// Ops lists the enabled op kinds (default MetisOps), from AllOps; the
	// names OpSetMetis and OpSetPersistence stand for their sets
	// ("metis", "fsync" is the Metis set and fsync).
	Ops []string
	// Weights gives op kinds relative weights in the draws after every
	// enabled kind has had its op (missing: 1; 0 disables the kind).
	Weights map[string]float64
	// MaxLength caps offsets, sizes and truncate lengths (default
	// DefaultMaxLength).
	MaxLength int64
	// Direct adds O_DIRECT to the create flag bins (off by default: the
	// agent's fill buffers are not aligned for it on every filesystem).
	Direct bool
}

// NewMetisGenerator checks cfg and returns a generator.
func NewMetisGenerator(cfg GenConfig) (*MetisGenerator, error) {
	pool := cfg.Pool
	if pool == (PathPool{}) {
		pool = DefaultPool
	}
	if pool.FileBias == 0 {
		pool.FileBias = DefaultPool.FileBias
	}
	if err := pool.validate(); err != nil {
		return nil, err
	}
	ops := cfg.Ops
	if len(ops) == 0 {
		ops = MetisOps
	}
	maxLen := cfg.MaxLength
	if maxLen == 0 {
		maxLen = DefaultMaxLength
	}
	if maxLen < 1 || maxLen > 1<<30 {
		return nil, fmt.Errorf("explore: max length %d: want 1..%d", maxLen, 1<<30)
	}
	g := &MetisGenerator{bias: pool.FileBias, lengths: Lengths(maxLen), direct: cfg.Direct}
	g.files, g.dirs = pool.Paths()
	if err := g.enable(expandOps(ops), cfg.Weights); err != nil {
		return nil, err
	}
	g.collideLast = collideLastKinds(g.kinds, len(g.files) > 0)
	return g, nil
}

// enable checks the op kinds and their weights and sets g.kinds and g.cum.
func (g *MetisGenerator) enable(ops []string, weights map[string]float64) error {
	for k := range weights {
		if !slices.Contains(AllOps, k) {
			return fmt.Errorf("explore: weight for unknown op %q (want one of %v)", k, AllOps)
		}
	}
	seen := map[string]bool{}
	total := 0.0
	for _, k := range ops {
		if !slices.Contains(AllOps, k) {
			return fmt.Errorf("explore: unknown op %q (want one of %v, or the sets %q and %q)", k, AllOps, OpSetMetis, OpSetPersistence)
		}
		if seen[k] {
			return fmt.Errorf("explore: op %q listed twice", k)
		}
		seen[k] = true
		if len(g.files) == 0 && needsFile(k) {
			return fmt.Errorf("explore: op %q needs files in the pool", k)
		}
		if len(g.dirs) == 0 && (k == OpMkdir || k == OpRmdir) {
			return fmt.Errorf("explore: op %q needs dirs in the pool", k)
		}
		w, ok := weights[k]
		if !ok {
			w = 1
		}
		if w < 0 || w != w || w > 1e9 {
			return fmt.Errorf("explore: weight %v for %q: want 0..1e9", w, k)
		}
		if w == 0 {
			continue
		}
		total += w
		g.kinds = append(g.kinds, k)
		g.cum = append(g.cum, total)
	}
	if len(g.kinds) == 0 {
		return fmt.Errorf("explore: no op kind enabled")
	}
	return nil
}

// Kinds lists the enabled op kinds (weight above 0), in GenConfig.Ops order:
// every state tries one op of each.
func (g *MetisGenerator) Kinds() []string { return slices.Clone(g.kinds) }

func needsFile(kind string) bool {
	switch kind {
	case OpCreateFile, OpWriteFile, OpTruncate, OpUnlink, OpLink, OpSymlink, OpWriteFar, OpTruncateFar, OpRegrow:
		return true
	}
	return false
}

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// anyPath draws a file with probability bias, else a dir (an existing one,
// mostly, in a state-aware draw).
func (g *MetisGenerator) anyPath(rng *rand.Rand) (string, bool) { return g.anyPathBiased(rng, g.bias) }

// renameFlagBias is the file bias of the renameat2 kinds' paths: a
// directory a third of the time, not Metis's one in twenty. What their
// flags change is mostly a directory's ('..' of an exchanged or
// whited-out directory moved to another parent; bugs/f2fs-*-pino,
// f2fs-rename-whiteout-dotdot).
const renameFlagBias = 2.0 / 3

// anyPathBiased is anyPath with file bias bias. In a state-aware draw a
// kind of which nothing exists yields to the other kind when that has an
// entry: a rename at a state of directories only takes a directory, not
// a file that is not there (ENOENT, the state unchanged).
func (g *MetisGenerator) anyPathBiased(rng *rand.Rand, bias float64) (string, bool) {
	switch {
	case len(g.dirs) == 0:
		return g.file(rng), true
	case len(g.files) == 0:
		return g.dir(rng), false
	}
	file := rng.Float64() < bias
	switch {
	case file && len(g.exFiles) == 0 && len(g.exDirs) > 0:
		file = false
	case !file && len(g.exDirs) == 0 && len(g.exFiles) > 0:
		file = true
	}
	if file {
		return g.file(rng), true
	}
	return g.dir(rng), false
}

// prefer picks from fit when it is not empty, always while g.fitAll is set
// and else with probability existingBias; otherwise from all. Without state
// (plain Draw) fit is empty.
func (g *MetisGenerator) prefer(rng *rand.Rand, fit, all []string) string {
	if len(fit) > 0 && (g.fitAll || rng.Float64() < existingBias) {
		return pick(rng, fit)
	}
	return pick(rng, all)
}

// file is a pool file for an op that needs one to exist.
func (g *MetisGenerator) file(rng *rand.Rand) string { return g.prefer(rng, g.exFiles, g.files) }

// writable is a pool file for a write with O_CREAT: one that exists or
// one whose parent does.
func (g *MetisGenerator) writable(rng *rand.Rand) string {
	return g.prefer(rng, slices.Concat(g.exFiles, g.newFiles), g.files)
}

// dir is a pool dir for an op that needs one to exist.
func (g *MetisGenerator) dir(rng *rand.Rand) string { return g.prefer(rng, g.exDirs, g.dirs) }

// collideDir is the directory a collide burst fills: in a state-aware
// draw, half the time one of the pool dirs that exist (drawn), else the
// root. A root is special on some filesystems (fixed in size on FAT12 and
// FAT16, always a FAT chain on exFAT), so a burst only there would never
// grow an ordinary directory.
func (g *MetisGenerator) collideDir(rng *rand.Rand) string {
	if len(g.exDirs) == 0 || rng.IntN(2) == 0 {
		return ""
	}
	return pick(rng, g.exDirs)
}

// fileIn is the file a burst's last op in dir ("" the root) takes (the
// source of its rename or link, the target of its symlink): an existing
// pool file of that directory where there is one, so that the burst's
// last name is made from a name of the directory it grew; else file's.
func (g *MetisGenerator) fileIn(rng *rand.Rand, dir string) string {
	var in []string
	for _, f := range g.exFiles {
		if path.Dir(f) == cmp.Or(dir, ".") {
			in = append(in, f)
		}
	}
	if len(in) == 0 {
		return g.file(rng)
	}
	return pick(rng, in)
}

// newFile is a pool file for an op that creates one.
func (g *MetisGenerator) newFile(rng *rand.Rand) string { return g.prefer(rng, g.newFiles, g.files) }

// newDir is a pool dir for an op that creates one.
func (g *MetisGenerator) newDir(rng *rand.Rand) string { return g.prefer(rng, g.newDirs, g.dirs) }

// One draws a single op.
func (g *MetisGenerator) One(rng *rand.Rand) *agentv1.Request {
	x := rng.Float64() * g.cum[len(g.cum)-1]
	i := sort.Search(len(g.cum), func(i int) bool { return g.cum[i] > x })
	return g.build(rng, g.kinds[min(i, len(g.kinds)-1)])
}

func (g *MetisGenerator) build(rng *rand.Rand, kind string) *agentv1.Request {
	r := &agentv1.Request{}
	switch kind {
	case OpCreateFile:
		extra := []uint32{0, oExcl, oTrunc}
		if g.direct {
			extra = append(extra, oDirect)
		}
		r.Op = &agentv1.Request_Create{Create: &agentv1.Create{
			Path: g.newFile(rng), Flags: oCreat | oWronly | pick(rng, extra), Mode: pick(rng, Modes)}}
	case OpWriteFile:
		r.Op = &agentv1.Request_Write{Write: &agentv1.Write{
			Path: g.file(rng), Flags: oRdwr | pick(rng, []uint32{0, oAppend, oSync}),
			Offset: pick(rng, g.lengths), Size: pick(rng, g.lengths), Fill: pick(rng, Fills)}}
	case OpTruncate:
		r.Op = &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Path: g.file(rng), Length: pick(rng, g.lengths)}}
	case OpWriteFar:
		// O_CREAT: a far write makes its file (mode 0644), so that one op
		// puts an extent at the limit and the next writes past it.
		r.Op = &agentv1.Request_Write{Write: &agentv1.Write{
			Path: g.file(rng), Flags: oRdwr | oCreat | pick(rng, []uint32{0, oSync}),
			Offset: pick(rng, FarLengths), Size: pick(rng, g.lengths), Fill: pick(rng, Fills)}}
	case OpTruncateFar:
		r.Op = &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Path: g.file(rng), Length: pick(rng, FarLengths)}}
	case OpUnlink:
		r.Op = &agentv1.Request_Unlink{Unlink: &agentv1.Unlink{Path: g.file(rng)}}
	case OpMkdir:
		r.Op = &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: g.newDir(rng), Mode: pick(rng, Modes)}}
	case OpRmdir:
		r.Op = &agentv1.Request_Rmdir{Rmdir: &agentv1.Rmdir{Path: g.dir(rng)}}
	case OpChmod:
		p, _ := g.anyPath(rng)
		r.Op = &agentv1.Request_Chmod{Chmod: &agentv1.Chmod{Path: p, Mode: pick(rng, Modes)}}
	case OpChown:
		p, _ := g.anyPath(rng)
		r.Op = &agentv1.Request_Chown{Chown: &agentv1.Chown{Path: p, Uid: pick(rng, IDs), Gid: -1}}
	case OpChgrp:
		p, _ := g.anyPath(rng)
		r.Op = &agentv1.Request_Chown{Chown: &agentv1.Chown{Path: p, Uid: -1, Gid: pick(rng, IDs)}}
	case OpSetxattr:
		p, _ := g.anyPath(rng)
		r.Op = &agentv1.Request_Setxattr{Setxattr: &agentv1.Setxattr{
			Path: p, Name: pick(rng, XattrNames), Value: XattrValue, Flags: xattrCreate}}
	case OpRemovexattr:
		p, _ := g.anyPath(rng)
		r.Op = &agentv1.Request_Removexattr{Removexattr: &agentv1.Removexattr{Path: p, Name: pick(rng, XattrNames)}}
	case OpRename:
		src, isFile := g.anyPath(rng)
		dst := g.newDir(rng)
		if isFile {
			dst = g.newFile(rng)
		}
		r.Op = &agentv1.Request_Rename{Rename: &agentv1.Rename{Path: src, NewPath: dst}}
	case OpRenameNoreplace, OpRenameWhiteout:
		src, isFile := g.anyPathBiased(rng, min(g.bias, renameFlagBias))
		dst := g.newDir(rng)
		if isFile {
			dst = g.newFile(rng)
		}
		flags := uint32(renameNoreplace)
		if kind == OpRenameWhiteout {
			flags = renameWhiteout
		}
		r.Op = &agentv1.Request_Rename{Rename: &agentv1.Rename{Path: src, NewPath: dst, Flags: flags}}
	case OpRenameExchange:
		// Both must exist: two existing paths, a file and a dir at times.
		a, _ := g.anyPathBiased(rng, min(g.bias, renameFlagBias))
		b, _ := g.anyPathBiased(rng, min(g.bias, renameFlagBias))
		r.Op = &agentv1.Request_Rename{Rename: &agentv1.Rename{Path: a, NewPath: b, Flags: renameExchange}}
	case OpLink:
		r.Op = &agentv1.Request_Link{Link: &agentv1.Link{Path: g.file(rng), NewPath: g.newFile(rng)}}
	case OpSymlink:
		target, _ := g.anyPath(rng)
		r.Op = &agentv1.Request_Symlink{Symlink: &agentv1.Symlink{Target: target, Path: g.newFile(rng)}}
	case OpFsync, OpFdatasync:
		r.Op = &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: g.persistPath(rng), Datasync: kind == OpFdatasync}}
	case OpSync:
		r.Op = &agentv1.Request_Sync{Sync: &agentv1.Sync{}}
	case OpCollide:
		dir := g.collideDir(rng)
		last := pick(rng, g.collideLast)
		var file string
		if last != OpCreateFile && last != OpMkdir {
			file = g.fileIn(rng, dir)
		}
		return buildCollide(dir, last, file, pick(rng, Modes))
	case OpRegrow:
		return buildRegrow(rng, g.writable(rng), g.lengths)
	default:
		panic("explore: unknown op kind " + kind) // kinds are checked by NewMetisGenerator
	}
	return r
}

// DrawAt implements StateAwareGenerator: Draw with the arguments fitted to
// state (the entries of the first lane).
func (g *MetisGenerator) DrawAt(rng *rand.Rand, n int, state []*agentv1.Entry) []*agentv1.Request {
	kind := make(map[string]agentv1.Kind, len(state))
	for _, e := range state {
		kind[e.GetPath()] = e.GetKind()
	}
	parentExists := func(p string) bool {
		i := strings.LastIndexByte(p, '/')
		return i < 0 || kind[p[:i]] == agentv1.Kind_KIND_DIRECTORY
	}
	g.exFiles, g.exDirs, g.newFiles, g.newDirs = nil, nil, nil, nil
	for _, f := range g.files {
		if k, ok := kind[f]; ok && k != agentv1.Kind_KIND_DIRECTORY {
			g.exFiles = append(g.exFiles, f)
		} else if !ok && parentExists(f) {
			g.newFiles = append(g.newFiles, f)
		}
	}
	for _, d := range g.dirs {
		if k, ok := kind[d]; ok && k == agentv1.Kind_KIND_DIRECTORY {
			g.exDirs = append(g.exDirs, d)
		} else if !ok && parentExists(d) {
			g.newDirs = append(g.newDirs, d)
		}
	}
	g.changed = changedSince(g.rootState(state), state)
	defer func() { g.exFiles, g.exDirs, g.newFiles, g.newDirs, g.changed = nil, nil, nil, nil, nil }()
	return g.draw(rng, n)
}

// drawAttempts bounds the draws spent per wanted op when looking for
// distinct ones (the op space may be smaller than n).
const drawAttempts = 16

// Draw implements Generator: one op of every enabled kind, in an order
// drawn from rng, then weighted draws up to n distinct ops (so
// max(n, kinds) ops, fewer only when the op space is smaller than n). The
// paths come from the whole pool (DrawAt fits them to a state).
func (g *MetisGenerator) Draw(rng *rand.Rand, n int) []*agentv1.Request {
	return g.draw(rng, n)
}

// draw is Draw with whatever state the fit lists hold.
func (g *MetisGenerator) draw(rng *rand.Rand, n int) []*agentv1.Request {
	out := make([]*agentv1.Request, 0, max(n, len(g.kinds)))
	seen := make(map[string]bool, cap(out))
	g.fitAll = true
	for _, i := range rng.Perm(len(g.kinds)) {
		// Ops of different kinds differ: no duplicate to skip here.
		op := g.build(rng, g.kinds[i])
		seen[opKey(op)] = true
		out = append(out, op)
	}
	g.fitAll = false
	return drawDistinct(rng, n, g.One, seen, out)
}

// drawDistinct appends ops from one, skipping those in seen, until out
// holds n ops or it has tried drawAttempts*n times.
func drawDistinct(rng *rand.Rand, n int, one func(*rand.Rand) *agentv1.Request, seen map[string]bool, out []*agentv1.Request) []*agentv1.Request {
	for range drawAttempts * n {
		if len(out) >= n {
			break
		}
		op := one(rng)
		k := opKey(op)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, op)
	}
	return out
}

// opKey is a byte string equal for equal ops.
func opKey(op *agentv1.Request) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(op)
	if err != nil {
		panic("explore: marshal op: " + err.Error())
	}
	return string(b)
}

// OpKind names the lane operation a request carries ("truncate",
// "chown", ...; chown with uid -1 is "chgrp", fsync with datasync
// "fdatasync", a collide burst or an op making a colliding name
// "collide", a regrow burst "regrow": its ops are plain writes and
// truncates), or "" when none.
func OpKind(op *agentv1.Request) string {
	if b, burst := op.GetOp().(*agentv1.Request_Batch); burst {
		if slices.ContainsFunc(b.Batch.GetRequests(), collides) {
			return OpCollide
		}
		return OpRegrow
	}
	if collides(op) {
		return OpCollide // one of a burst's ops
	}
	switch o := op.GetOp().(type) {
	case *agentv1.Request_Create:
		return OpCreateFile
	case *agentv1.Request_Write:
		if o.Write.GetOffset() >= farFloor {
			return OpWriteFar
		}
		return OpWriteFile
	case *agentv1.Request_Truncate:
		if o.Truncate.GetLength() >= farFloor {
			return OpTruncateFar
		}
		return OpTruncate
	case *agentv1.Request_Unlink:
		return OpUnlink
	case *agentv1.Request_Mkdir:
		return OpMkdir
	case *agentv1.Request_Rmdir:
		return OpRmdir
	case *agentv1.Request_Chmod:
		return OpChmod
	case *agentv1.Request_Chown:
		if o.Chown.GetUid() == -1 {
			return OpChgrp
		}
		return OpChown
	case *agentv1.Request_Setxattr:
		return OpSetxattr
	case *agentv1.Request_Removexattr:
		return OpRemovexattr
	case *agentv1.Request_Rename:
		switch o.Rename.GetFlags() {
		case renameNoreplace:
			return OpRenameNoreplace
		case renameExchange:
			return OpRenameExchange
		case renameWhiteout:
			return OpRenameWhiteout
		}
		return OpRename
	case *agentv1.Request_Link:
		return OpLink
	case *agentv1.Request_Symlink:
		return OpSymlink
	case *agentv1.Request_Fsync:
		if o.Fsync.GetDatasync() {
			return OpFdatasync
		}
		return OpFsync
	case *agentv1.Request_Sync:
		return OpSync
	case nil:
		return ""
	default:
		return fmt.Sprintf("%T", o)
	}
}
