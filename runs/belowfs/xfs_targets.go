package belowfs

import (
	"fmt"
	"strings"

	"github.com/themisfs/themis/fsimage/xfs"
	"github.com/themisfs/themis/overlay"
)

// xfsFields maps each ext2/3/4 field a target names to the xfs field of
// the same structure class: the superblock's magic, inode count, block
// count and block size log; AG 0's headers for group 0's descriptor (the
// free space B+tree root for the block bitmap, the inode B+tree root for
// the inode table, the free block and inode counts); an inode core's size,
// mode, nlink, owners, flags and block count; a short-form directory
// entry's offset tag (for rec_len), name length, inode number and file
// type.
var xfsFields = map[string]map[string]string{
	targetSuper: {"magic": "magicnum", "inodes_count": "icount", "blocks_count": "dblocks", "log_block_size": "blocklog",
		"free_blocks_count": "fdblocks", "free_inodes_count": "ifree"},
	targetGD: {"bg_block_bitmap": "agf.bno_root", "bg_inode_table": "agi.root", "bg_free_blocks_count": "agf.freeblks",
		"bg_free_inodes_count": "agi.freecount"},
	targetInode: {"i_size": "size", "i_mode": "mode", "i_links_count": "nlink", "i_uid": "uid", "i_gid": "gid",
		"i_flags": "flags", "i_blocks": "nblocks"},
	targetDirent: {"rec_len": "offset", "name_len": "namelen", "inode": "inumber", "file_type": "ftype"},
}

// xfsField is the xfs field t's ext field maps to, or an error saying xfs
// has none.
func xfsField(t Target) (string, error) {
	return mappedField(t, "xfs", xfsFields, "xfs keeps no allocation bitmaps: its free space and inodes are B+trees")
}

// resolveXfs finds t's bit on xfs image fs (size bytes): a file byte in its
// data block, a mapped field (bit 0 of its least significant byte), or a
// raw bit.
func resolveXfs(t Target, fs *xfs.FS, size int64) (flip, error) {
	locate := func(off int64, bit int, field string) flip {
		return flip{LBA: uint64(off / overlay.SectorSize), Offset: int(off % overlay.SectorSize), Bit: bit, Region: RegionUnparsed, Field: field}
	}
	if t.Kind == targetLBA {
		return resolveRaw(t, size)
	}
	if t.Kind == targetData {
		off, err := fs.FileByte(t.Path, uint64(t.Offset))
		if err != nil {
			return flip{}, err
		}
		return locate(off, t.Bit, fmt.Sprintf("data of %s, byte %d", t.Path, t.Offset)), nil
	}
	name, err := xfsField(t)
	if err != nil {
		return flip{}, err
	}
	var f xfs.Field
	switch t.Kind {
	case targetSuper:
		f, err = fs.SuperField(name)
	case targetGD:
		if agf, ok := strings.CutPrefix(name, "agf."); ok {
			f, err = fs.AGFField(agf)
		} else {
			f, err = fs.AGIField(strings.TrimPrefix(name, "agi."))
		}
	case targetInode:
		f, err = fs.InodeField(t.Path, name)
	case targetDirent:
		f, err = fs.EntryField(t.Path, t.Name, name)
	}
	if err != nil {
		return flip{}, err
	}
	return locate(f.Phys, 0, fmt.Sprintf("%s as %s %s", t.Field, f.Where, name)), nil
}
