package belowfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/fsimage/btrfs"
	"github.com/themisfs/themis/fsimage/xfs"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/relay"
	"github.com/themisfs/themis/session"
	"go.uber.org/zap"
)

// Blast-radius classes of a corruption (the paper's Table 11), most
// severe first: the first that applies is the result's Class.
const (
	// ClassKernelCrash: the mount of the flipped image, or a read after
	// it, crashed the guest's kernel (CorruptResult.Kernel holds the
	// report); ClassHung and ClassDied: the guest stopped answering, or
	// died, without a report (package relay). The run goes on in a fresh
	// session.
	ClassKernelCrash    = relay.KernelCrash
	ClassHung           = relay.Hung
	ClassDied           = relay.Died
	ClassFatal          = "fatal"           // the mount fails
	ClassNamespaceLoss  = "namespace-loss"  // paths vanish while the filesystem stays mounted
	ClassDetected       = "detected"        // a filesystem error in the kernel log (EXTn-fs error, BTRFS checksum failure), or EIO/EUCLEAN/EBADMSG reading an affected file
	ClassSilentMetadata = "silent-metadata" // a path's metadata (size, mode, links, ...) changed, no error
	ClassSilentContent  = "silent-content"  // only file content changed, no error
	ClassNone           = "none"            // nothing observable changed
	// ClassNotApplicable marks a sweep target naming a structure the
	// lane's filesystem does not have (an ext2/3/4 superblock field on
	// btrfs): nothing was flipped.
	ClassNotApplicable = "n/a"
)

// Table11Targets are the paper's Table 11 corruptions of the default setup.
var Table11Targets = []string{"data:d/f:0:0", "inode:d/f:i_size", "dirent:d:f:rec_len", "superblock.magic"}

// SweepTargets are one target of every class, over the default setup.
var SweepTargets = []string{
	"data:d/f:0:0", "inode:d/f:i_size", "inode:d/f:i_mode", "inode:d/f:i_links_count",
	"dirent:d:f:rec_len", "superblock.magic", "superblock.inodes_count", "superblock.log_block_size",
	"gd.bg_inode_table", "gd.bg_block_bitmap", "bitmap.block", "bitmap.inode",
}

// DefaultCorruptSetup is the tree the default targets name. d/f has 4 KiB
// so that every lane keeps it in a data block: btrfs stores files up to
// max_inline (2 KiB) inline in a metadata leaf, where a flipped "data"
// bit is a metadata checksum failure instead.
var DefaultCorruptSetup = []string{"mkdir d 0755", "create d/f 0644", "write d/f 0 4096 0x41", "create d/g 0644", "sync"}

// CorruptOptions are the inputs of Corrupt.
type CorruptOptions struct {
	// Lanes are lane specs, as for Create; ext2/3/4 or btrfs. Default
	// ["ext2"].
	Lanes []string
	// Targets name the bit to flip (see ParseTarget). Default
	// Table11Targets, or SweepTargets with Sweep.
	Targets []string
	// Setup runs once on every lane before the checkpoint (default
	// DefaultCorruptSetup); a sync always follows.
	Setup []string
	// Sweep runs SweepTargets (added to Targets) on every lane; on a
	// lane whose filesystem lacks a target's structure (btrfs has no
	// ext2/3/4 superblock field, ...) the result is ClassNotApplicable.
	Sweep bool
	// MemoryMiB is guest RAM in MiB (default 128).
	MemoryMiB int
	// Image is the guest image to boot (session.CreateOptions.Image).
	Image string
}

// CorruptResult is what one flipped bit did to one lane.
type CorruptResult struct {
	Lane, Target string
	// LBA, Offset (byte in the sector) and Bit (0 = least significant) say
	// which bit was flipped.
	LBA    uint64
	Offset int
	Bit    int
	// Region is the kind of the sector (fsimage's, or fsimage/btrfs's on
	// btrfs); Field the structure field. For ClassNotApplicable, Field says
	// why and nothing else is set.
	Region, Field string
	// Mounted is whether the mount after the flip succeeded; MountError
	// is the guest's message when it did not.
	Mounted    bool
	MountError string
	// KernelLog is the kernel log lines the mount and the observation added.
	KernelLog []string
	// Affected are the paths whose leaf (TIME_MODE_NONE) differs from the
	// unflipped counterfactual's, or that vanished or appeared.
	Affected []string
	// ReadErrno is the first errno reading an affected regular file (0: none).
	ReadErrno int32
	// FsckClean is the host checker's verdict on the flipped image (e2fsck
	// -fn; btrfs check --readonly --check-data-csum); FsckSummary its last
	// lines (btrfs: its error lines).
	FsckClean   bool
	FsckSummary string
	// FsckTool is the checker that ran ("" where the lane's filesystem
	// has none: FsckClean is false and means nothing).
	FsckTool string
	// Class is one of the Class* constants.
	Class string
	// Kernel is the kernel's report of a ClassKernelCrash result (its
	// text is KernelLog too).
	Kernel *kreport.Report
}

// CorruptSummary is the outcome of a Corrupt run.
type CorruptSummary struct {
	// Session is the run's session (ended when Corrupt returns).
	Session string
	// Results counts results; ByClass by class.
	Results int
	ByClass map[string]int
	// Elapsed is the run's wall time, boot excluded.
	Elapsed time.Duration
	// Sessions are every session the run used, Session first; Deaths
	// the guests lost (a flip that lost one went on in a fresh session).
	Sessions []string
	Deaths   int
}

// Target kinds.
const (
	targetSuper  = "superblock"
	targetGD     = "gd"
	targetInode  = "inode"
	targetDirent = "dirent"
	targetData   = "data"
	targetBitmap = "bitmap"
	targetLBA    = "lba"
)

// Target is a parsed corruption target; ParseTarget makes it, resolve
// finds its bit on an image.
type Target struct {
	Kind string
	// Field is the structure field (superblock, gd, inode, dirent), or
	// "block"/"inode" for a bitmap.
	Field string
	// Path is the file (inode, data) or directory (dirent; "" the root).
	Path string
	// Name is a dirent's name.
	Name string
	// LBA (lba), Offset (data: file byte; lba: byte in the sector), Bit.
	LBA    uint64
	Offset int64
	Bit    int
}

// field tables: name → (byte offset in the structure, C name).
type fieldOff struct {
	off  int64
	name string
}

var superFields = map[string]fieldOff{
	"inodes_count": {0, "s_inodes_count"}, "blocks_count": {4, "s_blocks_count_lo"},
	"free_blocks_count": {12, "s_free_blocks_count_lo"}, "free_inodes_count": {16, "s_free_inodes_count"},
	"first_data_block": {20, "s_first_data_block"}, "log_block_size": {24, "s_log_block_size"},
	"blocks_per_group": {32, "s_blocks_per_group"}, "inodes_per_group": {40, "s_inodes_per_group"},
	"magic": {56, "s_magic"}, "state": {58, "s_state"}, "rev_level": {76, "s_rev_level"},
	"first_ino": {84, "s_first_ino"}, "inode_size": {88, "s_inode_size"},
	"feature_compat": {92, "s_feature_compat"}, "feature_incompat": {96, "s_feature_incompat"},
	"feature_ro_compat": {100, "s_feature_ro_compat"},
}

var gdFields = map[string]fieldOff{
	"bg_block_bitmap": {0, "bg_block_bitmap"}, "bg_inode_bitmap": {4, "bg_inode_bitmap"},
	"bg_inode_table": {8, "bg_inode_table"}, "bg_free_blocks_count": {12, "bg_free_blocks_count"},
	"bg_free_inodes_count": {14, "bg_free_inodes_count"}, "bg_used_dirs_count": {16, "bg_used_dirs_count"},
}

var inodeFields = map[string]fieldOff{
	"i_mode": {0, "i_mode"}, "i_uid": {2, "i_uid"}, "i_size": {4, "i_size_lo"}, "i_gid": {24, "i_gid"},
	"i_links_count": {26, "i_links_count"}, "i_blocks": {28, "i_blocks_lo"}, "i_flags": {32, "i_flags"},
	"i_block": {40, "i_block[0]"},
}

var direntFields = map[string]fieldOff{
	"inode": {0, "inode"}, "rec_len": {4, "rec_len"}, "name_len": {6, "name_len"}, "file_type": {7, "file_type"},
}

func names(m map[string]fieldOff) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(sortedStrings(out), ", ")
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}

// ParseTarget reads one target:
//
//	superblock.<field>              a byte of the primary superblock (magic, inodes_count, log_block_size, ...)
//	gd.<field>                      a byte of group 0's descriptor (bg_inode_table, bg_block_bitmap, ...)
//	inode:<path>:<field>            a byte of path's inode (i_size, i_mode, i_links_count, ...)
//	dirent:<dir>:<name>:<field>     a byte of name's entry in dir (rec_len, name_len, inode, file_type)
//	data:<path>:<offset>:<bit>      bit of the file byte at offset, in its data block
//	bitmap.block | bitmap.inode     the highest set bit of group 0's bitmap
//	lba:<lba>:<offset>:<bit>        a raw bit: byte offset 0..511 of sector lba
//
// A field target flips bit 0 of the field's first (least significant) byte.
// Paths are relative to the lane root; "" or "/" names the root directory.
// Every kind applies to ext2/3/4 lanes; btrfs lanes take data and lba
// (see Target.AppliesTo).
func ParseTarget(s string) (Target, error) {
	s = strings.TrimSpace(s)
	if t, ok, err := parseFieldTarget(s); ok {
		return t, err
	}
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Target{}, fmt.Errorf("%q: want superblock.<field>, gd.<field>, bitmap.block|inode, inode:…, dirent:…, data:… or lba:…", s)
	}
	parts := strings.Split(rest, ":")
	switch kind {
	case targetInode:
		return parseInodeTarget(s, parts)
	case targetDirent:
		return parseDirentTarget(s, parts)
	case targetData:
		return parseDataTarget(s, parts)
	case targetLBA:
		return parseLBATarget(s, parts)
	}
	return Target{}, fmt.Errorf("%q: unknown target kind %q", s, kind)
}

// parseFieldTarget reads the dotted targets (superblock.<field>,
// gd.<field>, bitmap.block, bitmap.inode); ok is false when s is none of
// them.
func parseFieldTarget(s string) (t Target, ok bool, err error) {
	switch {
	case strings.HasPrefix(s, "superblock."):
		f := strings.TrimPrefix(strings.TrimPrefix(s, "superblock."), "s_")
		if _, ok := superFields[f]; !ok {
			return Target{}, true, fmt.Errorf("superblock field %q: want one of %s", f, names(superFields))
		}
		return Target{Kind: targetSuper, Field: f}, true, nil
	case strings.HasPrefix(s, "gd."):
		f := strings.TrimPrefix(s, "gd.")
		if !strings.HasPrefix(f, "bg_") {
			f = "bg_" + f
		}
		if _, ok := gdFields[f]; !ok {
			return Target{}, true, fmt.Errorf("group descriptor field %q: want one of %s", strings.TrimPrefix(s, "gd."), names(gdFields))
		}
		return Target{Kind: targetGD, Field: f}, true, nil
	case s == "bitmap.block" || s == "bitmap.inode":
		return Target{Kind: targetBitmap, Field: strings.TrimPrefix(s, "bitmap.")}, true, nil
	}
	return Target{}, false, nil
}

// targetNumber reads v, the target's what, as a non-negative integer (any
// base prefix), at most limit unless limit is negative.
func targetNumber(what, v string, limit int64) (int64, error) {
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil || n < 0 || (limit >= 0 && n > limit) {
		if limit >= 0 {
			return 0, fmt.Errorf("%s %q: want 0..%d", what, v, limit)
		}
		return 0, fmt.Errorf("%s %q: want a non-negative integer", what, v)
	}
	return n, nil
}

// parseInodeTarget reads the parts of target s after "inode:",
// <path>:<field>.
func parseInodeTarget(s string, parts []string) (Target, error) {
	if len(parts) != 2 {
		return Target{}, fmt.Errorf("%q: want inode:<path>:<field>", s)
	}
	p, err := targetPath(parts[0], false)
	if err != nil {
		return Target{}, err
	}
	if _, ok := inodeFields[parts[1]]; !ok {
		return Target{}, fmt.Errorf("inode field %q: want one of %s", parts[1], names(inodeFields))
	}
	return Target{Kind: targetInode, Path: p, Field: parts[1]}, nil
}

// parseDirentTarget reads the parts of target s after "dirent:",
// <dir>:<name>:<field>.
func parseDirentTarget(s string, parts []string) (Target, error) {
	if len(parts) != 3 {
		return Target{}, fmt.Errorf("%q: want dirent:<dir>:<name>:<field>", s)
	}
	p, err := targetPath(parts[0], true)
	if err != nil {
		return Target{}, err
	}
	if parts[1] == "" || strings.Contains(parts[1], "/") {
		return Target{}, fmt.Errorf("dirent name %q: want one name", parts[1])
	}
	if _, ok := direntFields[parts[2]]; !ok {
		return Target{}, fmt.Errorf("dirent field %q: want one of %s", parts[2], names(direntFields))
	}
	return Target{Kind: targetDirent, Path: p, Name: parts[1], Field: parts[2]}, nil
}

// parseDataTarget reads the parts of target s after "data:",
// <path>:<offset>:<bit>.
func parseDataTarget(s string, parts []string) (Target, error) {
	if len(parts) != 3 {
		return Target{}, fmt.Errorf("%q: want data:<path>:<offset>:<bit>", s)
	}
	p, err := targetPath(parts[0], false)
	if err != nil {
		return Target{}, err
	}
	off, err := targetNumber("offset", parts[1], -1)
	if err != nil {
		return Target{}, err
	}
	bit, err := targetNumber("bit", parts[2], 7)
	if err != nil {
		return Target{}, err
	}
	return Target{Kind: targetData, Path: p, Offset: off, Bit: int(bit)}, nil
}

// parseLBATarget reads the parts of target s after "lba:",
// <lba>:<offset>:<bit>.
func parseLBATarget(s string, parts []string) (Target, error) {
	if len(parts) != 3 {
		return Target{}, fmt.Errorf("%q: want lba:<lba>:<offset>:<bit>", s)
	}
	lba, err := targetNumber("lba", parts[0], -1)
	if err != nil {
		return Target{}, err
	}
	off, err := targetNumber("offset", parts[1], overlay.SectorSize-1)
	if err != nil {
		return Target{}, err
	}
	bit, err := targetNumber("bit", parts[2], 7)
	if err != nil {
		return Target{}, err
	}
	return Target{Kind: targetLBA, LBA: uint64(lba), Offset: off, Bit: int(bit)}, nil
}

func targetPath(p string, rootOK bool) (string, error) {
	p = strings.TrimPrefix(p, "/")
	if p == "" && !rootOK {
		return "", errors.New("path: required")
	}
	if err := session.CheckPath("path", p); err != nil {
		return "", err
	}
	return p, nil
}

// flip is a resolved target: bit Bit of byte Offset of sector LBA.
type flip struct {
	LBA           uint64
	Offset, Bit   int
	Region, Field string
	// again, when set, resolves the target once more on the stopped
	// lane's image just before the flip: btrfs's umount commits, and a
	// commit moves the metadata it rewrites (copy on write), so a tree
	// item found at the checkpoint may lie in a freed block by then.
	again func(d *overlay.Device) (flip, error)
}

// at makes a flip of bit of the image byte at off.
func at(fs *fsimage.FS, off int64, bit int, field string) flip {
	lba := uint64(off / overlay.SectorSize)
	return flip{LBA: lba, Offset: int(off % overlay.SectorSize), Bit: bit, Region: fs.Locate(lba).Kind, Field: field}
}

// resolve finds t's bit on the image fs parsed from r (size bytes). A
// target that names nothing on this image (no such file, a hole, an LBA
// past the end) is an error.
func resolve(t Target, fs *fsimage.FS, r interface {
	ReadAt([]byte, int64) (int, error)
}, size int64) (flip, error) {
	switch t.Kind {
	case targetSuper:
		f := superFields[t.Field]
		return at(fs, fsimage.SuperblockOffset+f.off, 0, f.name), nil
	case targetGD:
		gs := fs.Groups()
		if len(gs) == 0 {
			return flip{}, errors.New("no block group")
		}
		f := gdFields[t.Field]
		return at(fs, gs[0].Offset+f.off, 0, f.name), nil
	case targetInode:
		ino, err := fs.Lookup(t.Path)
		if err != nil {
			return flip{}, err
		}
		lba, off, err := fs.InodeLocation(ino)
		if err != nil {
			return flip{}, err
		}
		f := inodeFields[t.Field]
		return at(fs, int64(lba)*overlay.SectorSize+int64(off)+f.off, 0, fmt.Sprintf("inode %d %s", ino, f.name)), nil
	case targetDirent:
		ino, err := fs.Lookup(t.Path)
		if err != nil {
			return flip{}, err
		}
		ents, err := fs.ReadDir(ino)
		if err != nil {
			return flip{}, err
		}
		for _, e := range ents {
			if e.Name == t.Name {
				f := direntFields[t.Field]
				off := int64(e.Block)*int64(fs.BlockSize()) + int64(e.Offset) + f.off
				return at(fs, off, 0, fmt.Sprintf("dirent %q %s", e.Name, f.name)), nil
			}
		}
		return flip{}, fmt.Errorf("directory %q has no entry %q", t.Path, t.Name)
	case targetData:
		ino, err := fs.Lookup(t.Path)
		if err != nil {
			return flip{}, err
		}
		in, err := fs.Inode(ino)
		if err != nil {
			return flip{}, err
		}
		if !in.IsRegular() || uint64(t.Offset) >= in.Size {
			return flip{}, fmt.Errorf("%q: offset %d is not inside a regular file of %d bytes", t.Path, t.Offset, in.Size)
		}
		blocks, err := fs.Blocks(ino)
		if err != nil {
			return flip{}, err
		}
		bs := int64(fs.BlockSize())
		i := t.Offset / bs
		if i >= int64(len(blocks)) || blocks[i] == 0 {
			return flip{}, fmt.Errorf("%q: offset %d is in a hole", t.Path, t.Offset)
		}
		return at(fs, int64(blocks[i])*bs+t.Offset%bs, t.Bit, fmt.Sprintf("data of inode %d, byte %d", ino, t.Offset)), nil
	case targetBitmap:
		gs := fs.Groups()
		if len(gs) == 0 {
			return flip{}, errors.New("no block group")
		}
		sb := fs.Superblock()
		blk, n := gs[0].BlockBitmap, int64(sb.BlocksPerGroup)
		if t.Field == "inode" {
			blk, n = gs[0].InodeBitmap, int64(sb.InodesPerGroup)
		}
		bs := int64(fs.BlockSize())
		buf := make([]byte, bs)
		if _, err := r.ReadAt(buf, int64(blk)*bs); err != nil {
			return flip{}, fmt.Errorf("read %s bitmap: %w", t.Field, err)
		}
		for i := min(n, bs*8) - 1; i >= 0; i-- {
			if buf[i/8]&(1<<(i%8)) != 0 {
				return at(fs, int64(blk)*bs+i/8, int(i%8), fmt.Sprintf("%s bitmap bit %d", t.Field, i)), nil
			}
		}
		return flip{}, fmt.Errorf("group 0's %s bitmap has no bit set", t.Field)
	case targetLBA:
		if t.LBA >= uint64(size/overlay.SectorSize) {
			return flip{}, fmt.Errorf("lba %d: past the disk's %d sectors", t.LBA, size/overlay.SectorSize)
		}
		f := at(fs, int64(t.LBA)*overlay.SectorSize+t.Offset, t.Bit, "raw")
		return f, nil
	}
	return flip{}, fmt.Errorf("unknown target kind %q", t.Kind)
}

// extOnly names the ext2/3/4 structure each ext-only target kind flips.
var extOnly = map[string]string{
	targetSuper:  "superblock field",
	targetGD:     "group descriptor",
	targetInode:  "inode field",
	targetDirent: "directory entry",
	targetBitmap: "block group bitmap",
}

// AppliesTo reports whether filesystem fs ("ext2", "btrfs", ...) has the
// structure t names: every kind on ext2/3/4; on btrfs a file's data (found
// in the default subvolume's file extents), raw bits, and the metadata
// fields btrfsFields maps (superblock, block group item, inode item,
// directory item); bitmaps are not btrfs structures.
func (t Target) AppliesTo(fs string) error {
	noun, ok := extOnly[t.Kind]
	switch {
	case strings.HasPrefix(fs, "ext"), !ok && (fs == "btrfs" || fs == "xfs" || t.Kind == targetLBA):
		return nil
	case fs == "btrfs":
		_, err := btrfsField(t)
		return err
	case fs == "xfs":
		_, err := xfsField(t)
		return err
	case t.Kind == targetLBA:
		return nil
	case !ok:
		return fmt.Errorf("no parser reads %s images yet: a file's data cannot be found (lba:… targets apply)", fs)
	}
	return fmt.Errorf("an ext2/3/4 %s is not a %s structure (no parser reads %s images yet; lba:… targets apply)", noun, fs, fs)
}

// resolveBtrfs finds t's bit on the btrfs image fs (size bytes): a file
// byte in the first copy of its extent (or inline in its metadata leaf),
// or a raw bit.
func resolveBtrfs(t Target, fs *btrfs.FS, size int64) (flip, error) {
	if err := t.AppliesTo("btrfs"); err != nil {
		return flip{}, err
	}
	locate := func(off int64, bit int, field string) flip {
		lba := uint64(off / overlay.SectorSize)
		return flip{LBA: lba, Offset: int(off % overlay.SectorSize), Bit: bit, Region: fs.Locate(lba).Kind, Field: field}
	}
	switch t.Kind {
	case targetData:
		loc, err := fs.FileByte(t.Path, uint64(t.Offset))
		if err != nil {
			return flip{}, err
		}
		field := fmt.Sprintf("data of inode %d, byte %d (logical %d)", loc.Ino, t.Offset, loc.Logical)
		if loc.Inline {
			field = fmt.Sprintf("inline data of inode %d, byte %d (in a metadata leaf)", loc.Ino, t.Offset)
		}
		if n := len(loc.Copies); n > 1 {
			field += fmt.Sprintf(", copy 1 of %d", n)
		}
		return locate(loc.Phys, t.Bit, field), nil
	case targetLBA:
		if t.LBA >= uint64(size/overlay.SectorSize) {
			return flip{}, fmt.Errorf("lba %d: past the disk's %d sectors", t.LBA, size/overlay.SectorSize)
		}
		return locate(int64(t.LBA)*overlay.SectorSize+t.Offset, t.Bit, "raw"), nil
	case targetSuper, targetGD, targetInode, targetDirent:
		return resolveBtrfsField(t, fs)
	}
	return flip{}, fmt.Errorf("unknown target kind %q", t.Kind)
}

// resolveRaw finds an lba target's bit on an image no parser reads.
func resolveRaw(t Target, size int64) (flip, error) {
	if t.Kind != targetLBA {
		return flip{}, fmt.Errorf("target kind %q needs a parser of the lane's filesystem", t.Kind)
	}
	if t.LBA >= uint64(size/overlay.SectorSize) {
		return flip{}, fmt.Errorf("lba %d: past the disk's %d sectors", t.LBA, size/overlay.SectorSize)
	}
	return flip{LBA: t.LBA, Offset: int(t.Offset), Bit: t.Bit, Region: RegionUnparsed, Field: "raw"}, nil
}

type corruptTarget struct {
	text string
	t    Target
	// implicit is set for the targets the run chose (SweepTargets,
	// Table11Targets by default): on a lane without the structure they are
	// ClassNotApplicable instead of an error.
	implicit bool
}

// validateCorruptLanes fills the default lane and checks every lane's host
// checker is installed where its filesystem has one (hostfsck.For; vfat,
// udf and overlay have none, and their results say so).
func validateCorruptLanes(o *CorruptOptions) ([]guest.LaneSpec, error) {
	if len(o.Lanes) == 0 {
		o.Lanes = []string{"ext2"}
	}
	co := session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB}
	specs, err := session.ValidateCreate(&co)
	if err != nil {
		return nil, err
	}
	o.MemoryMiB = co.MemoryMiB
	for i, sp := range specs {
		tool, err := hostfsck.For(sp.FS)
		if err != nil {
			continue // no checker: the results say so
		}
		if err := tool.Installed(); err != nil {
			return nil, errkind.Invalid(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
	}
	return specs, nil
}

func validateCorrupt(o *CorruptOptions) ([]corruptTarget, []profileOp, error) {
	specs, err := validateCorruptLanes(o)
	if err != nil {
		return nil, nil, err
	}
	given, implicit := len(o.Targets), true
	switch {
	case o.Sweep:
		o.Targets = append(append([]string(nil), o.Targets...), SweepTargets...)
	case len(o.Targets) == 0:
		o.Targets = append([]string(nil), Table11Targets...)
	default:
		implicit = false
	}
	ts := make([]corruptTarget, len(o.Targets))
	for i, s := range o.Targets {
		t, err := ParseTarget(s)
		if err != nil {
			return nil, nil, errkind.Invalid(fmt.Sprintf("targets[%d]", i), "%v", err)
		}
		ts[i] = corruptTarget{text: strings.TrimSpace(s), t: t, implicit: implicit && i >= given}
		if ts[i].implicit {
			continue
		}
		// A target asked for by name must exist on every lane.
		for _, sp := range specs {
			if err := t.AppliesTo(sp.FS); err != nil {
				return nil, nil, errkind.Invalid(fmt.Sprintf("targets[%d]", i), "%s on lane %s (%s): %v", ts[i].text, sp.Name, sp.FS, err)
			}
		}
	}
	if o.Setup == nil {
		o.Setup = append([]string(nil), DefaultCorruptSetup...)
	}
	setup, err := parseOps("setup", o.Setup, false)
	if err != nil {
		return nil, nil, err
	}
	return ts, setup, nil
}

// Corrupt creates a session for o.Lanes, runs o.Setup and a sync,
// checkpoints, and for every lane and target: restores the checkpoint,
// stops the lane's world (sync, umount, drop caches: the guest keeps no
// cached copy), flips the target's bit in the overlay's top layer, mounts
// again and observes (mount result, kernel log, fingerprint against the
// unflipped counterfactual taken the same way, reads of the affected
// files, the host fsck), then restores the checkpoint and checks the lane's
// disk hash and fingerprint equal the checkpoint's: a corruption never
// outlives its branch. res (optional) gets every result.
//
// Targets are resolved on the live image after Setup, with fsimage on
// ext2/3/4 lanes and fsimage/btrfs on btrfs lanes; one that names nothing
// there is a FieldError ("targets[i]"), and so is a target given by name
// that names a structure some lane's filesystem does not have. The
// targets the run chose itself (Sweep, the default) are ClassNotApplicable
// results there instead.
func Corrupt(ctx context.Context, m *session.Manager, o CorruptOptions, res func(CorruptResult)) (_ *CorruptSummary, err error) {
	targets, setup, err := validateCorrupt(&o)
	if err != nil {
		return nil, err
	}
	// Owned (internal/scratch): a daemon that dies mid-run leaves it to the
	// next one's startup sweep.
	sd, err := scratch.MkdirTemp("", "themis-corrupt-")
	if err != nil {
		return nil, fmt.Errorf("corrupt: scratch dir: %w", err)
	}
	defer func() { err = errors.Join(err, sd.Remove()) }()
	dir := sd.Path
	ch, err := relay.Acquire(ctx, m, session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Image: o.Image}, "corrupt")
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	ctx = ch.Context() // ends on Delete and at the daemon's max run duration
	run := ch.Run()
	c := &corrupter{below: newBelow(run), chain: ch, scratch: filepath.Join(dir, "lane.img")}
	sum := &CorruptSummary{Session: run.ID(), ByClass: map[string]int{}}
	start := time.Now()
	run.Event(ctx, "corrupt.started", fmt.Sprintf("%d targets", len(targets)), nil)
	runErr := c.corrupt(ctx, setup, targets, func(r CorruptResult) {
		sum.Results++
		sum.ByClass[r.Class]++
		if res != nil {
			res(r)
		}
	})
	sum.Elapsed, sum.Sessions, sum.Deaths = time.Since(start), ch.Sessions(), ch.Deaths()
	run.Event(context.WithoutCancel(ctx), "corrupt.finished", fmt.Sprintf("%d results, %v, %d guests lost", sum.Results, sum.ByClass, sum.Deaths), nil)
	return sum, ch.Finish(runErr)
}

type corrupter struct {
	*below
	chain    *relay.Chain
	scratch  string // scratch file for the host fsck
	kmsgSeq  uint64 // last kernel log record seen
	kmsgSeen bool   // kmsgSeq is a record seen (the first may be 0)
}

// observation is one lane's state after a (possibly flipped) cold mount.
type observation struct {
	mounted    bool
	mountError string
	leaves     map[string]*agentv1.Entry // nil when the walk failed
}

func (c *corrupter) corrupt(ctx context.Context, setup []profileOp, targets []corruptTarget, emit func(CorruptResult)) error {
	if err := c.begin(ctx, setup); err != nil {
		return err
	}
	for i := range c.lanes {
		if err := c.corruptLane(ctx, setup, i, targets, emit); err != nil {
			return err
		}
	}
	return nil
}

// begin runs the setup (and its sync and root checkpoint) and reads the
// kernel log so far.
func (c *corrupter) begin(ctx context.Context, setup []profileOp) error {
	if err := c.setup(ctx, setup); err != nil {
		return err
	}
	_, err := c.kmsg(ctx)
	return err
}

// laneFlips is a lane made ready for its flips: each target's flip (or
// why it does not apply), the root's disk hash and fingerprint, and the
// unflipped counterfactual's observation.
type laneFlips struct {
	flips    []flip
	na       []string
	rootHash [32]byte
	rootRoot []byte
	cf       *observation
}

// corruptLane flips each target on lane i, each on a branch of the root. A
// flip that loses the guest (its mount crashes the kernel, ...) is a
// result of its death's class, and the next flips go on in a fresh
// session, the setup run again and the lane made ready again.
func (c *corrupter) corruptLane(ctx context.Context, setup []profileOp, i int, targets []corruptTarget, emit func(CorruptResult)) error {
	lane := c.lanes[i]
	var ln *laneFlips
	for j, t := range targets {
		if ln == nil {
			if err := c.live(ctx, setup); err != nil {
				return err
			}
			var err error
			if ln, err = c.ready(ctx, i, targets); err != nil {
				return err
			}
		}
		if ln.na[j] != "" {
			emit(CorruptResult{Lane: lane, Target: t.text, Field: ln.na[j], Class: ClassNotApplicable})
			continue
		}
		r, err := c.one(ctx, i, t.text, ln.flips[j], ln.cf)
		if d, dead := relay.Of(ctx, err); dead {
			c.chain.Lost(d)
			c.run.Log().Warn("a flip lost the guest: the run goes on in a fresh session", zap.String("lane", lane), zap.String("target", t.text), zap.String("death", d.Summary()))
			emit(deathResult(r, d))
			ln = nil
			continue
		}
		if err != nil {
			return fmt.Errorf("lane %s, target %s: %w", lane, t.text, err)
		}
		if err := c.branchGone(ctx, i, ln, t.text); err != nil {
			return err
		}
		emit(r)
	}
	return nil
}

// deathResult is r, whose flip lost the guest (d), of the death's class.
func deathResult(r CorruptResult, d *relay.Death) CorruptResult {
	out := CorruptResult{Lane: r.Lane, Target: r.Target, LBA: r.LBA, Offset: r.Offset, Bit: r.Bit, Region: r.Region, Field: r.Field,
		Class: d.Verdict(), Kernel: d.Report, KernelLog: []string{d.Summary()}}
	if d.Report != nil && d.Report.Text != "" {
		out.KernelLog = strings.Split(d.Report.Text, "\n")
	}
	return out
}

// live makes the corrupter's session one whose guest lives: after a
// death, a fresh one (relay.Chain.Live) with the setup run again.
func (c *corrupter) live(ctx context.Context, setup []profileOp) error {
	run, replaced, err := c.chain.Live()
	if err != nil || !replaced {
		return err
	}
	c.below, c.kmsgSeq, c.kmsgSeen = newBelow(run), 0, false
	if err := c.begin(ctx, setup); err != nil {
		return fmt.Errorf("the setup again in session %s, after the guest died: %w", run.ID(), err)
	}
	return nil
}

// ready resolves each target's flip on lane i (or says why it does not
// apply), keeps the root's state and observes the unflipped
// counterfactual.
func (c *corrupter) ready(ctx context.Context, i int, targets []corruptTarget) (*laneFlips, error) {
	lane, fsName := c.lanes[i], c.specs[i].FS
	resolveOn, err := c.resolver(ctx, i)
	if err != nil {
		return nil, err
	}
	ln := &laneFlips{flips: make([]flip, len(targets)), na: make([]string, len(targets))}
	for j, t := range targets {
		if err := t.t.AppliesTo(fsName); err != nil {
			ln.na[j] = fmt.Sprintf("%s has no ext2/3/4 %s", fsName, extOnly[t.t.Kind])
			if fsName != "btrfs" {
				ln.na[j] = fmt.Sprintf("%s: %v", fsName, err)
			}
			continue
		}
		err := c.dev(ctx, i, "resolve target", func(d *overlay.Device) error {
			var err error
			ln.flips[j], err = resolveOn(t.t, d)
			return err
		})
		if err != nil {
			return nil, errkind.Invalid(fmt.Sprintf("targets[%d]", j), "lane %s: %v", lane, err)
		}
	}
	if ln.rootHash, ln.rootRoot, err = c.state(ctx, i); err != nil {
		return nil, err
	}
	if err := c.restore(ctx); err != nil {
		return nil, err
	}
	if ln.cf, err = c.observe(ctx, i, nil); err != nil {
		return nil, fmt.Errorf("lane %s: counterfactual: %w", lane, err)
	}
	if !ln.cf.mounted || ln.cf.leaves == nil {
		return nil, fmt.Errorf("lane %s: counterfactual remount failed: %s", lane, ln.cf.mountError)
	}
	return ln, nil
}

// branchGone restores the root after target's flip on lane i and checks
// that its disk and fingerprint are the root's again.
func (c *corrupter) branchGone(ctx context.Context, i int, ln *laneFlips, target string) error {
	if err := c.restore(ctx); err != nil {
		return err
	}
	h, root, err := c.state(ctx, i)
	if err != nil {
		return err
	}
	if h != ln.rootHash || !bytes.Equal(root, ln.rootRoot) {
		return fmt.Errorf("lane %s, target %s: the corruption outlived its branch (disk hash %x, checkpoint %x)", c.lanes[i], target, h[:8], ln.rootHash[:8])
	}
	return nil
}

func (c *corrupter) resolver(ctx context.Context, i int) (func(Target, *overlay.Device) (flip, error), error) {
	switch fsName := c.specs[i].FS; {
	case fsName == "xfs":
		// Resolved on the stopped image only: after a sync xfs keeps
		// metadata in its log, written in place at umount.
		return func(t Target, _ *overlay.Device) (flip, error) {
			return flip{Region: RegionUnparsed, Field: "(resolved at the flip)", again: func(d *overlay.Device) (flip, error) {
				fs, err := xfs.Open(d, d.Size())
				if err != nil {
					return flip{}, err
				}
				return resolveXfs(t, fs, d.Size())
			}}, nil
		}, nil
	case fsName != "btrfs" && !strings.HasPrefix(fsName, "ext"):
		return func(t Target, d *overlay.Device) (flip, error) { return resolveRaw(t, d.Size()) }, nil
	}
	if c.specs[i].FS != "btrfs" {
		fs, err := c.image(ctx, i)
		if err != nil {
			return nil, err
		}
		return func(t Target, d *overlay.Device) (flip, error) { return resolve(t, fs, d, d.Size()) }, nil
	}
	var fs *btrfs.FS
	err := c.dev(ctx, i, "parse image", func(d *overlay.Device) error {
		var err error
		fs, err = btrfs.Open(d, d.Size())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lane %s: %w", c.lanes[i], err)
	}
	return func(t Target, d *overlay.Device) (flip, error) {
		f, err := resolveBtrfs(t, fs, d.Size())
		f.again = func(d *overlay.Device) (flip, error) {
			fs, err := btrfs.Open(d, d.Size())
			if err != nil {
				return flip{}, err
			}
			return resolveBtrfs(t, fs, d.Size())
		}
		return f, err
	}, nil
}

// state is lane i's disk hash and fingerprint root (TIME_MODE_NONE).
func (c *corrupter) state(ctx context.Context, i int) ([32]byte, []byte, error) {
	var h [32]byte
	err := c.dev(ctx, i, "disk hash", func(d *overlay.Device) error {
		var err error
		h, err = d.Hash()
		return err
	})
	if err != nil {
		return h, nil, err
	}
	resp, err := c.run.CallOK(ctx, "fingerprint "+c.lanes[i], agent.NewRequest(&agentv1.Fingerprint{Lane: c.lanes[i], TimeMode: agentv1.TimeMode_TIME_MODE_NONE}))
	if err != nil {
		return h, nil, err
	}
	return h, resp.GetFingerprint().GetRoot(), nil
}

// kmsg returns the kernel log lines after the last seen: at most
// maxKmsgCalls calls, a response that brings no line newer than the last
// seen ends the drain, and what is kept is bounded (kmsgKeep).
func (c *corrupter) kmsg(ctx context.Context) ([]string, error) {
	var keep kmsgKeep
	for range maxKmsgCalls {
		resp, err := c.run.CallOK(ctx, "kmsg", &agentv1.Request{Op: &agentv1.Request_Kmsg{Kmsg: &agentv1.Kmsg{AfterSeq: c.kmsgSeq}}})
		if err != nil {
			return nil, err
		}
		fresh := false
		for _, l := range resp.GetKmsg().GetLines() {
			if c.kmsgSeen && l.GetSeq() <= c.kmsgSeq {
				continue // not after the last seen: the agent repeats itself
			}
			c.kmsgSeq, c.kmsgSeen, fresh = l.GetSeq(), true, true
			keep.add(l.GetText())
		}
		if !fresh {
			return keep.lines(), nil
		}
	}
	keep.more = true
	return keep.lines(), nil
}

// observe stops lane i's world, applies f (nil: none), mounts and walks.
func (c *corrupter) observe(ctx context.Context, i int, f *flip) (*observation, error) {
	lane := c.lanes[i]
	if err := c.sync(ctx); err != nil {
		return nil, err
	}
	if err := c.umount(ctx, lane); err != nil {
		return nil, err
	}
	if err := c.dropCaches(ctx); err != nil {
		return nil, err
	}
	if f != nil {
		err := c.dev(ctx, i, "flip", func(d *overlay.Device) error {
			if f.again != nil {
				nf, err := f.again(d)
				if err != nil {
					return fmt.Errorf("resolve on the stopped image: %w", err)
				}
				*f = nf
			}
			var sec [overlay.SectorSize]byte
			off := int64(f.LBA) * overlay.SectorSize
			if _, err := d.ReadAt(sec[:], off); err != nil {
				return err
			}
			sec[f.Offset] ^= 1 << f.Bit
			_, err := d.WriteAt(sec[:], off)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if _, err := c.kmsg(ctx); err != nil { // lines before the mount are not the flip's
		return nil, err
	}
	resp, err := c.mount(ctx, lane)
	if err != nil {
		return nil, err
	}
	o := &observation{mounted: resp.GetErrno() == 0}
	if !o.mounted {
		o.mountError = fmt.Sprintf("errno %d: %s", resp.GetErrno(), resp.GetError())
		return o, nil
	}
	fp, err := c.run.Call(ctx, "fingerprint "+lane, agent.NewRequest(&agentv1.Fingerprint{Lane: lane, TimeMode: agentv1.TimeMode_TIME_MODE_NONE, Leaves: true}))
	if err != nil {
		return nil, err
	}
	// A walk with entries the filesystem refused to read is compared as a
	// failed walk: every counterfactual path is stat'ed and read (compare).
	if fp.GetErrno() == 0 && fp.GetError() == "" && fp.GetFingerprint().GetUnreadable() == 0 {
		o.leaves = map[string]*agentv1.Entry{}
		for _, e := range fp.GetFingerprint().GetLeaves() {
			o.leaves[e.GetPath()] = e
		}
	}
	return o, nil
}

// fsErrorLine matches the kernel's reports of damage it found: ext2/3/4
// errors, and btrfs errors and checksum failures (a data block's "csum
// failed", a tree block's "checksum verify failed", "bad tree block").
var fsErrorLine = regexp.MustCompile(`EXT[234]-fs (error|\(.*\): error)|BTRFS (error|critical) \(device |BTRFS warning \(device [^)]*\): (csum failed|checksum verify failed|bad tree block)`)

// Errnos that mean the filesystem detected the damage: EIO, EUCLEAN
// (EFSCORRUPTED) and EBADMSG (EFSBADCRC, a metadata checksum mismatch).
const (
	errnoEIO     = 5
	errnoEBADMSG = 74
	errnoEUCLEAN = 117
)

// one runs target f on lane i from the checkpoint.
func (c *corrupter) one(ctx context.Context, i int, text string, f flip, cf *observation) (CorruptResult, error) {
	lane := c.lanes[i]
	r := CorruptResult{Lane: lane, Target: text, LBA: f.LBA, Offset: f.Offset, Bit: f.Bit, Region: f.Region, Field: f.Field}
	if err := c.restore(ctx); err != nil {
		return r, err
	}
	o, err := c.observe(ctx, i, &f)
	if err != nil {
		return r, err
	}
	r.LBA, r.Offset, r.Bit, r.Region, r.Field = f.LBA, f.Offset, f.Bit, f.Region, f.Field // as flipped
	r.Mounted, r.MountError = o.mounted, o.mountError
	var vanished, meta, content bool
	if o.mounted {
		if vanished, meta, content, err = c.compare(ctx, lane, cf, o, &r); err != nil {
			return r, err
		}
	}
	if r.KernelLog, err = c.kmsg(ctx); err != nil {
		return r, err
	}
	if r.FsckClean, r.FsckSummary, err = c.fsck(ctx, i, o.mounted); err != nil {
		return r, err
	}
	if tool, err := hostfsck.For(c.specs[i].FS); err == nil {
		r.FsckTool = tool.Name
	}
	detected := r.ReadErrno == errnoEIO || r.ReadErrno == errnoEUCLEAN || r.ReadErrno == errnoEBADMSG
	for _, l := range r.KernelLog {
		detected = detected || fsErrorLine.MatchString(l)
	}
	switch {
	case !r.Mounted:
		r.Class = ClassFatal
	case vanished && r.ReadErrno == errnoEBADMSG:
		// The object is refused on a checksum mismatch (EFSBADCRC): the
		// filesystem caught the flip. Names lost to a rejected directory
		// block (EUCLEAN on lookup) stay namespace-loss, as in the paper.
		r.Class = ClassDetected
	case vanished:
		r.Class = ClassNamespaceLoss
	case detected:
		r.Class = ClassDetected
	case meta:
		r.Class = ClassSilentMetadata
	case content:
		r.Class = ClassSilentContent
	default:
		r.Class = ClassNone
	}
	return r, nil
}

// compare fills r.Affected and r.ReadErrno from the flipped observation
// against the counterfactual. When the flipped walk failed (a directory
// the kernel refuses to read, a file whose data fails its checksum), every
// counterfactual path is stat'ed and every regular file read.
func (c *corrupter) compare(ctx context.Context, lane string, cf, o *observation, r *CorruptResult) (vanished, meta, content bool, err error) {
	mode := agentv1.TimeMode_TIME_MODE_NONE
	got := o.leaves
	if got == nil {
		got = map[string]*agentv1.Entry{}
		for p := range cf.leaves {
			st, err := c.run.Call(ctx, "stat "+lane+"/"+p, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: p}))
			if err != nil {
				return false, false, false, err
			}
			if st.GetErrno() != 0 {
				continue
			}
			s := st.GetStat()
			e := &agentv1.Entry{Path: p, Kind: s.GetKind(), Mode: s.GetMode(), Uid: s.GetUid(), Gid: s.GetGid(), Nlink: s.GetNlink(), Size: s.GetSize(),
				ContentHash: cf.leaves[p].GetContentHash()}
			if s.GetKind() == agentv1.Kind_KIND_REGULAR {
				// The walk may have failed on this file's content (EIO on
				// a data checksum): a file that cannot be read is affected.
				errno, err := c.readAll(ctx, lane, p)
				if err != nil {
					return false, false, false, err
				}
				if errno != 0 {
					e.ContentHash = nil
				}
			}
			got[p] = e
		}
	}
	paths := map[string]bool{}
	for p := range cf.leaves {
		paths[p] = true
	}
	for p := range got {
		paths[p] = true
	}
	for _, p := range sortedStrings(keys(paths)) {
		a, b := cf.leaves[p], got[p]
		switch {
		case a == nil || b == nil:
			vanished = vanished || b == nil
			meta = true
		case oracle.LeafHash(a, mode) == oracle.LeafHash(b, mode):
			continue
		case a.GetKind() != b.GetKind() || a.GetMode() != b.GetMode() || a.GetUid() != b.GetUid() || a.GetGid() != b.GetGid() ||
			a.GetNlink() != b.GetNlink() || a.GetSize() != b.GetSize() || a.GetSymlinkTarget() != b.GetSymlinkTarget():
			meta = true
		default:
			content = true
		}
		r.Affected = append(r.Affected, p)
		if b != nil && b.GetKind() == agentv1.Kind_KIND_REGULAR && r.ReadErrno == 0 {
			if r.ReadErrno, err = c.readAll(ctx, lane, p); err != nil {
				return false, false, false, err
			}
		}
		if b == nil && a != nil && r.ReadErrno == 0 {
			// Gone from the walk: is the name gone, or does the
			// filesystem refuse it (EBADMSG on a checksum, EUCLEAN)?
			st, err := c.run.Call(ctx, "stat "+lane+"/"+p, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: p}))
			if err != nil {
				return false, false, false, err
			}
			if e := st.GetErrno(); e != 0 && e != int32(syscall.ENOENT) {
				r.ReadErrno = e
			}
		}
	}
	return vanished, meta, content, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// maxFsckSummary caps FsckSummary.
const maxFsckSummary = 1024

// fsck runs the lane's host checker (hostfsck.For) on lane i's resolved image
// (quiesced first when mounted: synced, or for xfs unmounted).
func (c *corrupter) fsck(ctx context.Context, i int, mounted bool) (bool, string, error) {
	tool, err := hostfsck.For(c.specs[i].FS)
	if err != nil {
		return false, "no host checker: " + err.Error(), nil
	}
	if mounted {
		// As the family says (xfs: sync leaves metadata in the log,
		// which xfs_repair -n cannot replay; umount writes it in place).
		// The branch is restored after, mounted.
		quiesce := c.sync
		if fam, err := family.Of(c.specs[i].FS); err == nil && fam.Quiesce == family.Remount {
			quiesce = func(ctx context.Context) error { return c.umount(ctx, c.lanes[i]) }
		}
		if err := quiesce(ctx); err != nil {
			return false, "", err
		}
	}
	if err := c.dev(ctx, i, "fsck image", func(d *overlay.Device) error { return scratch.WriteImage(c.scratch, d, d.Size()) }); err != nil {
		return false, "", err
	}
	verdict, out, err := tool.Run(ctx, c.scratch)
	if err != nil {
		return false, "", fmt.Errorf("fsck: %w", err)
	}
	if c.specs[i].FS == "btrfs" {
		return verdict == hostfsck.Clean, btrfsCheckSummary(out), nil
	}
	if verdict == hostfsck.Clean {
		return true, lastLines(out, 2), nil
	}
	return false, lastLines(out, 8), nil
}

// btrfsCheckLine is a line of btrfs check's output worth quoting: its
// errors and its verdict, not the progress and byte counts.
var btrfsCheckLine = regexp.MustCompile(`(?i)error|mismatch|corrupt|cannot|bad |no error found`)

// btrfsCheckSummary is btrfs check's error lines and verdict, the last 8.
func btrfsCheckSummary(out []byte) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && btrfsCheckLine.MatchString(l) {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return lastLines(out, 2)
	}
	return lastLines([]byte(strings.Join(keep, "\n")), 8)
}

// lastLines is the last n non-empty lines of out, capped.
func lastLines(out []byte, n int) string {
	var ls []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	ls = ls[max(len(ls)-n, 0):]
	s := strings.Join(ls, "; ")
	if len(s) > maxFsckSummary {
		s = s[:maxFsckSummary] + "..."
	}
	return s
}
