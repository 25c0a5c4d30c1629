package belowfs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/session"
)

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
