package btrfs

import (
	"fmt"
	iofs "io/fs"
	"path"

	"github.com/themisfs/themis/fsimage"
)

// Field is where one metadata field lies in the image (its first copy);
// every field but the superblock's sits in a tree block whose checksum
// covers it.
type Field = fsimage.Field

// fieldOff is a field's byte offset and width in its structure.
type fieldOff struct{ off, size int }

// SuperFields are the primary superblock's fields Field names (struct
// btrfs_super_block).
var SuperFields = map[string]fieldOff{
	"csum": {0, 4}, "bytenr": {0x30, 8}, "flags": {0x38, 8}, "magic": {0x40, 8}, "generation": {0x48, 8},
	"root": {0x50, 8}, "chunk_root": {0x58, 8}, "total_bytes": {0x70, 8}, "bytes_used": {0x78, 8},
	"root_dir_objectid": {0x80, 8}, "num_devices": {0x88, 8}, "sectorsize": {0x90, 4}, "nodesize": {0x94, 4},
}

// InodeFields are the inode item's fields (struct btrfs_inode_item).
var InodeFields = map[string]fieldOff{
	"generation": {0, 8}, "size": {16, 8}, "nbytes": {24, 8}, "nlink": {40, 4}, "uid": {44, 4}, "gid": {48, 4},
	"mode": {52, 4}, "flags": {64, 8},
}

// DirItemFields are a directory item's fields (struct btrfs_dir_item):
// the location key's object id, data and name lengths, and the type.
var DirItemFields = map[string]fieldOff{"location": {0, 8}, "data_len": {25, 2}, "name_len": {27, 2}, "type": {29, 1}}

// BlockGroupFields are a block group item's fields (struct
// btrfs_block_group_item).
var BlockGroupFields = map[string]fieldOff{"used": {0, 8}, "chunk_objectid": {8, 8}, "flags": {16, 8}}

// HeaderFields are a tree block header's fields (struct btrfs_header).
var HeaderFields = map[string]fieldOff{"csum": {0, 4}, "fsid": {32, 16}, "bytenr": {48, 8}, "generation": {80, 8},
	"owner": {88, 8}, "nritems": {96, 4}, "level": {100, 1}}

func pick(m map[string]fieldOff, what, name string) (fieldOff, error) {
	f, err := fsimage.PickField(m, what, name)
	if err != nil {
		return fieldOff{}, fmt.Errorf("btrfs: %w", err)
	}
	return f, nil
}

// SuperField locates a field of the primary superblock.
func (fs *FS) SuperField(name string) (Field, error) {
	f, err := pick(SuperFields, "superblock", name)
	if err != nil {
		return Field{}, err
	}
	return Field{Phys: SuperblockOffset + int64(f.off), Size: f.size, Where: "superblock"}, nil
}

// item returns the first item with key k's object id and type (any
// offset) in tree root, or an error wrapping io/fs.ErrNotExist.
func (fs *FS) item(root uint64, level uint8, lo, hi Key, what string) (Item, error) {
	var got Item
	found := false
	err := fs.walk(root, level, lo, hi, func(it Item) error {
		if !found {
			got, found = it, true
		}
		return nil
	})
	if err != nil {
		return Item{}, fmt.Errorf("btrfs: %s: %w", what, err)
	}
	if !found {
		return Item{}, fmt.Errorf("btrfs: %s: %w", what, iofs.ErrNotExist)
	}
	return got, nil
}

// at is the field f of item it, checked to lie inside the item.
func at(it Item, f fieldOff, where string) (Field, error) {
	if f.off+f.size > len(it.Data) {
		return Field{}, corrupt("%s of %d bytes has no field at %d+%d", where, len(it.Data), f.off, f.size)
	}
	return Field{Phys: it.Phys + int64(f.off), Size: f.size, Where: where}, nil
}

// inodeItem finds the inode item of the file at p in the default
// subvolume.
func (fs *FS) inodeItem(p string) (Item, uint64, error) {
	ino, err := fs.Lookup(p)
	if err != nil {
		return Item{}, 0, err
	}
	it, err := fs.item(fs.fsRoot, fs.fsLevel, Key{ino, TypeInodeItem, 0}, Key{ino, TypeInodeItem, 0}, fmt.Sprintf("inode %d", ino))
	return it, ino, err
}

// InodeField locates a field of the inode item of the file at p in the
// default subvolume.
func (fs *FS) InodeField(p, name string) (Field, error) {
	f, err := pick(InodeFields, "inode item", name)
	if err != nil {
		return Field{}, err
	}
	it, ino, err := fs.inodeItem(p)
	if err != nil {
		return Field{}, err
	}
	return at(it, f, fmt.Sprintf("inode item %d", ino))
}

// DirItemField locates a field of name's DIR_ITEM in directory dir (the
// entry itself, not its DIR_INDEX twin).
func (fs *FS) DirItemField(dir, name, field string) (Field, error) {
	f, err := pick(DirItemFields, "dir item", field)
	if err != nil {
		return Field{}, err
	}
	d, err := fs.Lookup(dir)
	if err != nil {
		return Field{}, err
	}
	k := Key{d, TypeDirItem, nameHash(name)}
	it, err := fs.item(fs.fsRoot, fs.fsLevel, k, k, fmt.Sprintf("dir item %q in %d", name, d))
	if err != nil {
		return Field{}, err
	}
	// Names whose hashes collide share the item: find name's entry.
	b, off := it.Data, 0
	for len(b) > 0 {
		if len(b) < dirItemSize {
			return Field{}, corrupt("dir item of %d bytes", len(b))
		}
		dataLen, nameLen := int(le.Uint16(b[25:])), int(le.Uint16(b[27:]))
		l := dirItemSize + nameLen + dataLen
		if l > len(b) {
			return Field{}, corrupt("dir item name %d + data %d bytes in %d", nameLen, dataLen, len(b))
		}
		if string(b[dirItemSize:dirItemSize+nameLen]) == name {
			sub := Item{Key: it.Key, Data: b[:l], Phys: it.Phys + int64(off)}
			return at(sub, f, fmt.Sprintf("dir item %d %q", d, path.Clean(name)))
		}
		b, off = b[l:], off+l
	}
	return Field{}, fmt.Errorf("btrfs: %q in directory %d: %w", name, d, iofs.ErrNotExist)
}

// TypeBlockGroupItem is the key type of a block group item (in the extent
// tree).
const (
	TypeBlockGroupItem = 192
	ExtentTreeID       = 2
)

// BlockGroupField locates a field of the first block group item (the
// extent tree's).
func (fs *FS) BlockGroupField(name string) (Field, error) {
	f, err := pick(BlockGroupFields, "block group item", name)
	if err != nil {
		return Field{}, err
	}
	ri, err := fs.rootItem(ExtentTreeID)
	if err != nil {
		return Field{}, err
	}
	var got Item
	found := false
	err = fs.walk(ri.Bytenr, ri.Level, Key{}, Key{^uint64(0), 0xff, ^uint64(0)}, func(it Item) error {
		if !found && it.Key.Type == TypeBlockGroupItem {
			got, found = it, true
		}
		return nil
	})
	if err != nil {
		return Field{}, fmt.Errorf("btrfs: extent tree: %w", err)
	}
	if !found {
		return Field{}, unsupported("no block group item in the extent tree (block group tree?)")
	}
	return at(got, f, fmt.Sprintf("block group item at %d", got.Key.ObjectID))
}

// HeaderField locates a field of the header of the leaf (first copy)
// holding the inode item of the file at p.
func (fs *FS) HeaderField(p, name string) (Field, error) {
	f, err := pick(HeaderFields, "tree block header", name)
	if err != nil {
		return Field{}, err
	}
	it, _, err := fs.inodeItem(p)
	if err != nil {
		return Field{}, err
	}
	return Field{Phys: it.Leaf + int64(f.off), Size: f.size, Where: fmt.Sprintf("tree block header at %d", it.Leaf)}, nil
}
