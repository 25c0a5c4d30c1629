package btrfs

import (
	"fmt"
	"hash/crc32"
	iofs "io/fs"
	"strings"

	"github.com/themisfs/themis/fsimage"
)

// MaxLookupDepth bounds the components of a looked-up path.
const MaxLookupDepth = 256

// maxExtents bounds the extent items read for one file.
const maxExtents = 1 << 16

// Inode is the fields of an INODE_ITEM this package uses.
type Inode struct {
	Ino   uint64
	Size  uint64
	Nlink uint32
	UID   uint32
	GID   uint32
	Mode  uint32
	Flags uint64
}

// IsDir reports whether the inode is a directory; IsRegular a regular file.
func (in Inode) IsDir() bool     { return in.Mode&0o170000 == 0o040000 }
func (in Inode) IsRegular() bool { return in.Mode&0o170000 == 0o100000 }

// Extent types.
const (
	ExtentInline   = 0
	ExtentRegular  = 1
	ExtentPrealloc = 2
)

// Extent is one EXTENT_DATA item of a file.
type Extent struct {
	// FileOffset is the file byte the extent starts at; Length its bytes
	// in the file (for an inline extent, the inline data's length).
	FileOffset, Length uint64
	Type               uint8 // Extent*
	Compression        uint8 // 0: none
	// DiskBytenr (logical, 0 for a hole) and DiskNumBytes are the on-disk
	// extent; Offset is where in it the file's bytes start.
	DiskBytenr, DiskNumBytes, Offset uint64
	// InlinePhys is the image offset of an inline extent's first byte.
	InlinePhys int64
}

// Location is where a file byte is on the image.
type Location struct {
	Ino uint64
	// Phys is the image offset of the byte's first copy; Copies every
	// copy's (DUP).
	Phys   int64
	Copies []int64
	// Logical is the byte's logical address (0 for an inline extent).
	Logical uint64
	// Inline is set when the byte is inline in a metadata leaf.
	Inline bool
	Extent Extent
}

// nameHash is btrfs_name_hash: crc32c seeded with ~1, without the final
// inversion.
func nameHash(name string) uint64 {
	return uint64(^crc32.Update(1, castagnoli, []byte(name)))
}

// Lookup resolves a path relative to the default subvolume's root ("" and
// "/" are the root directory) to an inode number.
func (fs *FS) Lookup(path string) (uint64, error) {
	ino := fs.rootDir
	parts := strings.Split(path, "/")
	if len(parts) > MaxLookupDepth {
		return 0, fmt.Errorf("btrfs: lookup %q: %w: over %d components", path, fsimage.ErrTooLarge, MaxLookupDepth)
	}
	for _, name := range parts {
		if name == "" {
			continue
		}
		if name == "." || name == ".." {
			return 0, fmt.Errorf("btrfs: lookup %q: %w: %q components are not resolved", path, fsimage.ErrUnsupported, name)
		}
		next, err := fs.lookupName(ino, name)
		if err != nil {
			return 0, fmt.Errorf("btrfs: lookup %q: %w", path, err)
		}
		ino = next
	}
	return ino, nil
}

// lookupName finds name in directory dir through its DIR_ITEM (keyed by
// the name's hash).
func (fs *FS) lookupName(dir uint64, name string) (uint64, error) {
	k := Key{dir, TypeDirItem, nameHash(name)}
	var ino uint64
	found := false
	err := fs.walk(fs.fsRoot, fs.fsLevel, k, k, func(it Item) error {
		b := it.Data
		for len(b) > 0 && !found {
			if len(b) < dirItemSize {
				return corrupt("dir item of %d bytes", len(b))
			}
			loc := parseKey(b)
			dataLen, nameLen := int(le.Uint16(b[25:])), int(le.Uint16(b[27:]))
			l := dirItemSize + nameLen + dataLen
			if l > len(b) {
				return corrupt("dir item name %d + data %d bytes in %d", nameLen, dataLen, len(b))
			}
			if string(b[dirItemSize:dirItemSize+nameLen]) == name {
				if loc.Type != TypeInodeItem {
					return unsupported("%q is a subvolume (location type %d)", name, loc.Type)
				}
				ino, found = loc.ObjectID, true
			}
			b = b[l:]
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%q in directory %d: %w", name, dir, iofs.ErrNotExist)
	}
	return ino, nil
}

// Inode reads inode ino of the default subvolume.
func (fs *FS) Inode(ino uint64) (Inode, error) {
	k := Key{ino, TypeInodeItem, 0}
	var in Inode
	found := false
	err := fs.walk(fs.fsRoot, fs.fsLevel, k, k, func(it Item) error {
		if len(it.Data) < inodeSize {
			return corrupt("inode item %d of %d bytes", ino, len(it.Data))
		}
		b := it.Data
		in = Inode{Ino: ino, Size: le.Uint64(b[16:]), Nlink: le.Uint32(b[40:]), UID: le.Uint32(b[44:]), GID: le.Uint32(b[48:]),
			Mode: le.Uint32(b[52:]), Flags: le.Uint64(b[64:])}
		found = true
		return nil
	})
	if err != nil {
		return Inode{}, fmt.Errorf("btrfs: inode %d: %w", ino, err)
	}
	if !found {
		return Inode{}, fmt.Errorf("btrfs: inode %d: %w", ino, iofs.ErrNotExist)
	}
	return in, nil
}

// Extents returns inode ino's file extents in file order.
func (fs *FS) Extents(ino uint64) ([]Extent, error) {
	var out []Extent
	err := fs.walk(fs.fsRoot, fs.fsLevel, Key{ino, TypeExtentData, 0}, Key{ino, TypeExtentData, ^uint64(0)}, func(it Item) error {
		if len(out) == maxExtents {
			return fmt.Errorf("%w: over %d extents", fsimage.ErrTooLarge, maxExtents)
		}
		e, err := parseExtent(it)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("btrfs: extents of inode %d: %w", ino, err)
	}
	return out, nil
}

func parseExtent(it Item) (Extent, error) {
	b := it.Data
	if len(b) < 21 {
		return Extent{}, corrupt("file extent item of %d bytes", len(b))
	}
	e := Extent{FileOffset: it.Key.Offset, Compression: b[16], Type: b[20]}
	switch e.Type {
	case ExtentInline:
		e.Length = uint64(len(b) - 21)
		e.InlinePhys = it.Phys + 21
	case ExtentRegular, ExtentPrealloc:
		if len(b) < 53 {
			return Extent{}, corrupt("file extent item of %d bytes", len(b))
		}
		e.DiskBytenr, e.DiskNumBytes, e.Offset, e.Length = le.Uint64(b[21:]), le.Uint64(b[29:]), le.Uint64(b[37:]), le.Uint64(b[45:])
	default:
		return Extent{}, corrupt("file extent type %d", e.Type)
	}
	if e.FileOffset+e.Length < e.FileOffset {
		return Extent{}, corrupt("file extent at %d of %d bytes wraps", e.FileOffset, e.Length)
	}
	return e, nil
}

// FileByte finds where byte off of path's file lies: in a data extent (on
// every copy of its chunk) or inline in a metadata leaf. A hole, a
// preallocated extent (it reads as zeros whatever is on disk) or a byte at
// or past the end is an error wrapping io/fs.ErrNotExist; a compressed
// extent one wrapping fsimage.ErrUnsupported.
func (fs *FS) FileByte(path string, off uint64) (Location, error) {
	ino, err := fs.Lookup(path)
	if err != nil {
		return Location{}, err
	}
	in, err := fs.Inode(ino)
	if err != nil {
		return Location{}, err
	}
	if !in.IsRegular() {
		return Location{}, fmt.Errorf("btrfs: %q: inode %d is not a regular file (mode %#o)", path, ino, in.Mode)
	}
	if off >= in.Size {
		return Location{}, fmt.Errorf("btrfs: %q: byte %d of a %d-byte file: %w", path, off, in.Size, iofs.ErrNotExist)
	}
	exts, err := fs.Extents(ino)
	if err != nil {
		return Location{}, err
	}
	for _, e := range exts {
		if off < e.FileOffset || off-e.FileOffset >= e.Length {
			continue
		}
		loc := Location{Ino: ino, Extent: e}
		switch {
		case e.Compression != 0:
			return Location{}, fmt.Errorf("btrfs: %q: byte %d: %w: compressed extent (type %d)", path, off, fsimage.ErrUnsupported, e.Compression)
		case e.Type == ExtentInline:
			loc.Inline = true
			loc.Phys = e.InlinePhys + int64(off-e.FileOffset)
			if loc.Phys < e.InlinePhys || loc.Phys >= fs.size {
				return Location{}, corrupt("inline extent byte %d outside the image", off)
			}
			loc.Copies = []int64{loc.Phys}
			return loc, nil
		case e.Type == ExtentPrealloc:
			return Location{}, fmt.Errorf("btrfs: %q: byte %d is in a preallocated extent (reads as zeros): %w", path, off, iofs.ErrNotExist)
		case e.DiskBytenr == 0:
			return Location{}, fmt.Errorf("btrfs: %q: byte %d is in a hole: %w", path, off, iofs.ErrNotExist)
		}
		loc.Logical = e.DiskBytenr + e.Offset + (off - e.FileOffset)
		if loc.Logical < e.DiskBytenr {
			return Location{}, corrupt("extent at %d: offset overflows", e.DiskBytenr)
		}
		if loc.Copies, err = fs.Physical(loc.Logical); err != nil {
			return Location{}, err
		}
		loc.Phys = loc.Copies[0]
		return loc, nil
	}
	return Location{}, fmt.Errorf("btrfs: %q: byte %d is in a hole: %w", path, off, iofs.ErrNotExist)
}

// ReadFile returns up to max bytes of inode ino's uncompressed content,
// holes and preallocated extents as zeros, for tests and cross-checks.
func (fs *FS) ReadFile(ino uint64, max int) ([]byte, error) {
	in, err := fs.Inode(ino)
	if err != nil {
		return nil, err
	}
	if in.Size > uint64(max) {
		return nil, fmt.Errorf("btrfs: inode %d: %w: %d bytes, limit %d", ino, fsimage.ErrTooLarge, in.Size, max)
	}
	exts, err := fs.Extents(ino)
	if err != nil {
		return nil, err
	}
	out := make([]byte, in.Size)
	for _, e := range exts {
		if e.FileOffset >= in.Size {
			continue
		}
		n := min(e.Length, in.Size-e.FileOffset)
		dst := out[e.FileOffset : e.FileOffset+n]
		switch {
		case e.Compression != 0:
			return nil, fmt.Errorf("btrfs: inode %d: %w: compressed extent", ino, fsimage.ErrUnsupported)
		case e.Type == ExtentInline:
			if err := readFull(fs.r, dst, e.InlinePhys); err != nil {
				return nil, err
			}
		case e.Type == ExtentPrealloc || e.DiskBytenr == 0:
		default:
			start := e.DiskBytenr + e.Offset
			c, err := fs.chunk(start)
			if err != nil {
				return nil, err
			}
			if start < e.DiskBytenr || start+n > c.Logical+c.Length || start+n < start {
				return nil, corrupt("inode %d: extent at %d+%d crosses its chunk's end", ino, start, n)
			}
			p, err := fs.Physical(start)
			if err != nil {
				return nil, err
			}
			if err := readFull(fs.r, dst, p[0]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
