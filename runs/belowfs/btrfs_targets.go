package belowfs

import (
	"fmt"

	"github.com/themisfs/themis/fsimage/btrfs"
	"github.com/themisfs/themis/overlay"
)

// btrfsFields maps each ext2/3/4 field a target names to the btrfs field
// of the same structure class that plays its part: the superblock's magic,
// its count of bytes used (for the count of inodes), its sector size (for
// the block size); the first block group item (for group 0's descriptor);
// an inode item's size, mode, nlink, owners, flags and byte count; a
// directory item's lengths, location and type (btrfs has no rec_len: its
// data length plays it). A field without a counterpart is not a btrfs
// structure (Target.AppliesTo).
var btrfsFields = map[string]map[string]string{
	targetSuper: {"magic": "magic", "inodes_count": "bytes_used", "blocks_count": "total_bytes", "log_block_size": "sectorsize",
		"state": "flags"},
	targetGD: {"bg_block_bitmap": "flags", "bg_inode_table": "chunk_objectid", "bg_free_blocks_count": "used"},
	targetInode: {"i_size": "size", "i_mode": "mode", "i_links_count": "nlink", "i_uid": "uid", "i_gid": "gid",
		"i_flags": "flags", "i_blocks": "nbytes"},
	targetDirent: {"rec_len": "data_len", "name_len": "name_len", "inode": "location", "file_type": "type"},
}

// btrfsField is the btrfs field t's ext field maps to, or an error saying
// btrfs has none.
func btrfsField(t Target) (string, error) {
	return mappedField(t, "btrfs", btrfsFields, "btrfs keeps no allocation bitmaps: its free space is a tree")
}

// mappedField is the field of filesystem fs that t's ext field maps to in
// fields, or an error saying fs has none (noBitmaps: why its structures
// hold no bitmap).
func mappedField(t Target, fs string, fields map[string]map[string]string, noBitmaps string) (string, error) {
	m, ok := fields[t.Kind]
	if !ok {
		return "", fmt.Errorf("an ext2/3/4 %s is not a %s structure (%s)", extOnly[t.Kind], fs, noBitmaps)
	}
	f, ok := m[t.Field]
	if !ok {
		return "", fmt.Errorf("ext2/3/4 %s %s has no %s counterpart (%s takes %s)", extOnly[t.Kind], t.Field, fs, fs, mappedNames(m))
	}
	return f, nil
}

func mappedNames(m map[string]string) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return fmt.Sprint(sortedStrings(out))
}

// resolveBtrfsField finds a metadata target's bit on btrfs image fs: bit 0
// of the first byte of the mapped field (first copy), named
// "<ext field> as <structure> <btrfs field>".
func resolveBtrfsField(t Target, fs *btrfs.FS) (flip, error) {
	name, err := btrfsField(t)
	if err != nil {
		return flip{}, err
	}
	var f btrfs.Field
	switch t.Kind {
	case targetSuper:
		f, err = fs.SuperField(name)
	case targetGD:
		f, err = fs.BlockGroupField(name)
	case targetInode:
		f, err = fs.InodeField(t.Path, name)
	case targetDirent:
		f, err = fs.DirItemField(t.Path, t.Name, name)
	}
	if err != nil {
		return flip{}, err
	}
	lba := uint64(f.Phys / overlay.SectorSize)
	return flip{LBA: lba, Offset: int(f.Phys % overlay.SectorSize), Bit: 0, Region: fs.Locate(lba).Kind,
		Field: fmt.Sprintf("%s as %s %s", t.Field, f.Where, name)}, nil
}
