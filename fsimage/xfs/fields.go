package xfs

import (
	"fmt"
	"path"

	"github.com/themisfs/themis/fsimage"
)

// Field is where one field lies in the image; Phys is its least
// significant (last: xfs is big-endian) byte.
type Field = fsimage.Field

// fieldOff is a field's byte offset and width in its structure.
type fieldOff struct{ off, size int }

// SuperFields are the primary superblock's fields (struct xfs_dsb).
var SuperFields = map[string]fieldOff{
	"magicnum": {0, 4}, "blocksize": {4, 4}, "dblocks": {8, 8}, "rootino": {56, 8}, "agblocks": {84, 4},
	"agcount": {88, 4}, "versionnum": {100, 2}, "inodesize": {104, 2}, "blocklog": {120, 1}, "icount": {128, 8},
	"ifree": {136, 8}, "fdblocks": {144, 8}, "crc": {224, 4},
}

// AGFFields are the AG free space header's fields (struct xfs_agf, the
// AG's second sector).
var AGFFields = map[string]fieldOff{
	"magicnum": {0, 4}, "seqno": {8, 4}, "length": {12, 4}, "bno_root": {16, 4}, "cnt_root": {20, 4},
	"freeblks": {52, 4}, "longest": {56, 4}, "crc": {216, 4},
}

// AGIFields are the AG inode header's fields (struct xfs_agi, the AG's
// third sector).
var AGIFields = map[string]fieldOff{
	"magicnum": {0, 4}, "seqno": {8, 4}, "count": {16, 4}, "root": {20, 4}, "level": {24, 4},
	"freecount": {28, 4}, "newino": {32, 4}, "crc": {312, 4},
}

// InodeFields are a v3 inode core's fields (struct xfs_dinode).
var InodeFields = map[string]fieldOff{
	"mode": {2, 2}, "format": {5, 1}, "uid": {8, 4}, "gid": {12, 4}, "nlink": {16, 4}, "size": {56, 8},
	"nblocks": {64, 8}, "nextents": {76, 4}, "flags": {90, 2}, "crc": {100, 4},
}

// EntryFields are a short-form directory entry's fields: its name length,
// its offset tag, its file type and its inode number.
var EntryFields = map[string]bool{"namelen": true, "offset": true, "ftype": true, "inumber": true}

func pick(m map[string]fieldOff, what, name string) (fieldOff, error) {
	f, err := fsimage.PickField(m, what, name)
	if err != nil {
		return fieldOff{}, fmt.Errorf("xfs: %w", err)
	}
	return f, nil
}

// lsb is the field f at base's least significant byte.
func lsb(base int64, f fieldOff, where string) Field {
	return Field{Phys: base + int64(f.off+f.size-1), Size: f.size, Where: where}
}

// SuperField locates a field of the primary superblock.
func (fs *FS) SuperField(name string) (Field, error) {
	f, err := pick(SuperFields, "superblock", name)
	if err != nil {
		return Field{}, err
	}
	return lsb(0, f, "superblock"), nil
}

// AGFField locates a field of AG 0's free space header.
func (fs *FS) AGFField(name string) (Field, error) {
	f, err := pick(AGFFields, "AGF", name)
	if err != nil {
		return Field{}, err
	}
	return lsb(int64(fs.sb.SectSize), f, "AGF 0"), nil
}

// AGIField locates a field of AG 0's inode header.
func (fs *FS) AGIField(name string) (Field, error) {
	f, err := pick(AGIFields, "AGI", name)
	if err != nil {
		return Field{}, err
	}
	return lsb(2*int64(fs.sb.SectSize), f, "AGI 0"), nil
}

// InodeField locates a core field of the inode at path p.
func (fs *FS) InodeField(p, name string) (Field, error) {
	f, err := pick(InodeFields, "inode", name)
	if err != nil {
		return Field{}, err
	}
	in, err := fs.Lookup(p)
	if err != nil {
		return Field{}, err
	}
	return lsb(in.Offset, f, fmt.Sprintf("inode %d", in.Ino)), nil
}

// EntryField locates a field of name's short-form entry in directory dir.
func (fs *FS) EntryField(dir, name, field string) (Field, error) {
	if !EntryFields[field] {
		return Field{}, fmt.Errorf("xfs: short-form entry field %q: want one of %s", field, fsimage.FieldNames(EntryFields))
	}
	d, err := fs.Lookup(dir)
	if err != nil {
		return Field{}, err
	}
	e, err := fs.lookupEntry(d, name)
	if err != nil {
		return Field{}, err
	}
	where := fmt.Sprintf("short-form entry %q in %d", path.Clean(name), d.Ino)
	var f fieldOff
	switch field {
	case "namelen":
		f = fieldOff{off: 0, size: 1}
	case "offset":
		f = fieldOff{off: 1, size: 2}
	case "ftype":
		if !e.ftype {
			return Field{}, unsupported("no file type in directory entries (ftype=0)")
		}
		f = fieldOff{off: 3 + len(e.Name), size: 1}
	case "inumber":
		off := 3 + len(e.Name)
		if e.ftype {
			off++
		}
		f = fieldOff{off: off, size: e.inoLen}
	}
	return lsb(e.Offset, f, where), nil
}
