package belowfs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/fsimage/btrfs"
	"github.com/themisfs/themis/overlay"
)

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
