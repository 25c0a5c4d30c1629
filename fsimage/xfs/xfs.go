package xfs

import (
	"encoding/binary"
	"fmt"
	"io"
	iofs "io/fs"
	"strings"

	"github.com/themisfs/themis/fsimage"
)

var be = binary.BigEndian

// On-disk constants (fs/xfs/libxfs/xfs_format.h, xfs_da_format.h).
const (
	// Magic is the superblock's magic, "XFSB".
	Magic = 0x58465342
	// inodeMagic is "IN".
	inodeMagic = 0x494e
	// coreSizeV3 is a v3 inode's core; its data fork follows.
	coreSizeV3 = 176
	// Fork formats.
	formatLocal   = 1
	formatExtents = 2
	// sbFtype is XFS_SB_FEAT_INCOMPAT_FTYPE: short-form entries carry a
	// file type byte.
	sbFtype = 1
	// maxDepth bounds a path lookup.
	maxDepth = 64
)

// Superblock is the fields of the primary superblock this package uses.
type Superblock struct {
	BlockSize  uint32
	DBlocks    uint64
	RootIno    uint64
	AGBlocks   uint32
	AGCount    uint32
	SectSize   uint16
	InodeSize  uint16
	InoPerBlk  uint16
	Version    uint16
	BlockLog   uint8
	InoPBLog   uint8
	AGBlkLog   uint8
	FeatIncomp uint32
}

// FS is an opened xfs image.
type FS struct {
	r    io.ReaderAt
	size int64
	sb   Superblock
}

func corrupt(format string, a ...any) error {
	return fmt.Errorf("xfs: %w: %s", fsimage.ErrCorrupt, fmt.Sprintf(format, a...))
}

func unsupported(format string, a ...any) error {
	return fmt.Errorf("xfs: %w: %s", fsimage.ErrUnsupported, fmt.Sprintf(format, a...))
}

// Open reads and checks the primary superblock of the image r of size
// bytes.
func Open(r io.ReaderAt, size int64) (*FS, error) {
	b := make([]byte, 512)
	if err := readFull(r, b, 0, size); err != nil {
		return nil, err
	}
	if be.Uint32(b) != Magic {
		return nil, corrupt("superblock magic %#08x", be.Uint32(b))
	}
	sb := Superblock{BlockSize: be.Uint32(b[4:]), DBlocks: be.Uint64(b[8:]), RootIno: be.Uint64(b[56:]),
		AGBlocks: be.Uint32(b[84:]), AGCount: be.Uint32(b[88:]), Version: be.Uint16(b[100:]), SectSize: be.Uint16(b[102:]),
		InodeSize: be.Uint16(b[104:]), InoPerBlk: be.Uint16(b[106:]), BlockLog: b[120], InoPBLog: b[123], AGBlkLog: b[124],
		FeatIncomp: be.Uint32(b[216:])}
	switch {
	case sb.BlockLog < 9 || sb.BlockLog > 16 || sb.BlockSize != 1<<sb.BlockLog:
		return nil, corrupt("block size %d (log %d)", sb.BlockSize, sb.BlockLog)
	case sb.InodeSize < 256 || sb.InodeSize > 2048 || sb.InodeSize&(sb.InodeSize-1) != 0:
		return nil, corrupt("inode size %d", sb.InodeSize)
	case uint32(sb.InoPerBlk)*uint32(sb.InodeSize) != sb.BlockSize || sb.InoPerBlk != 1<<sb.InoPBLog:
		return nil, corrupt("%d inodes of %d bytes per %d-byte block (log %d)", sb.InoPerBlk, sb.InodeSize, sb.BlockSize, sb.InoPBLog)
	case sb.AGBlocks == 0 || sb.AGBlkLog > 31 || uint64(sb.AGBlocks) > 1<<sb.AGBlkLog || sb.AGCount == 0:
		return nil, corrupt("%d allocation groups of %d blocks (log %d)", sb.AGCount, sb.AGBlocks, sb.AGBlkLog)
	case sb.SectSize < 512 || uint32(sb.SectSize) > sb.BlockSize || sb.SectSize&(sb.SectSize-1) != 0:
		return nil, corrupt("sector size %d", sb.SectSize)
	case sb.Version&0xf != 5:
		return nil, unsupported("superblock version %d (only v5, with CRCs)", sb.Version&0xf)
	}
	return &FS{r: r, size: size, sb: sb}, nil
}

// Superblock returns the primary superblock.
func (fs *FS) Superblock() Superblock { return fs.sb }

func readFull(r io.ReaderAt, b []byte, off, size int64) error {
	if off < 0 || off+int64(len(b)) > size {
		return corrupt("read of %d bytes at %d outside the %d-byte image", len(b), off, size)
	}
	if _, err := r.ReadAt(b, off); err != nil {
		return fmt.Errorf("xfs: read %d bytes at %d: %w", len(b), off, err)
	}
	return nil
}

// blockOffset is the image offset of file system block fsb (AG number in
// the high bits, block in AG in the low AGBlkLog bits).
func (fs *FS) blockOffset(fsb uint64) (int64, error) {
	agno, agbno := fsb>>fs.sb.AGBlkLog, fsb&(1<<fs.sb.AGBlkLog-1)
	if agno >= uint64(fs.sb.AGCount) || agbno >= uint64(fs.sb.AGBlocks) {
		return 0, corrupt("block %d: AG %d block %d outside the filesystem", fsb, agno, agbno)
	}
	off := int64((agno*uint64(fs.sb.AGBlocks) + agbno) << fs.sb.BlockLog)
	if off >= fs.size {
		return 0, corrupt("block %d at %d past the image", fsb, off)
	}
	return off, nil
}

// InodeOffset returns the image offset of inode ino.
func (fs *FS) InodeOffset(ino uint64) (int64, error) {
	shift := uint(fs.sb.InoPBLog) + uint(fs.sb.AGBlkLog)
	if shift >= 64 {
		return 0, corrupt("inode geometry")
	}
	agno, agino := ino>>shift, ino&(1<<shift-1)
	fsb := agno<<fs.sb.AGBlkLog | agino>>fs.sb.InoPBLog
	blk, err := fs.blockOffset(fsb)
	if err != nil {
		return 0, fmt.Errorf("inode %d: %w", ino, err)
	}
	off := blk + int64(agino&(1<<fs.sb.InoPBLog-1))*int64(fs.sb.InodeSize)
	if off+int64(fs.sb.InodeSize) > fs.size {
		return 0, corrupt("inode %d at %d past the image", ino, off)
	}
	return off, nil
}

// Inode is an inode's core fields this package uses, with its bytes.
type Inode struct {
	Ino    uint64
	Offset int64 // image offset of the inode
	Mode   uint16
	Format uint8
	Size   uint64
	NExt   uint32
	raw    []byte
}

// IsDir reports whether the inode is a directory.
func (in Inode) IsDir() bool { return in.Mode&0o170000 == 0o040000 }

// Inode reads inode ino.
func (fs *FS) Inode(ino uint64) (Inode, error) {
	off, err := fs.InodeOffset(ino)
	if err != nil {
		return Inode{}, err
	}
	b := make([]byte, fs.sb.InodeSize)
	if err := readFull(fs.r, b, off, fs.size); err != nil {
		return Inode{}, err
	}
	if be.Uint16(b) != inodeMagic {
		return Inode{}, corrupt("inode %d: magic %#04x", ino, be.Uint16(b))
	}
	if b[4] != 3 {
		return Inode{}, unsupported("inode %d: version %d (v5 filesystems have v3 inodes)", ino, b[4])
	}
	return Inode{Ino: ino, Offset: off, Mode: be.Uint16(b[2:]), Format: b[5], Size: be.Uint64(b[56:]), NExt: be.Uint32(b[76:]), raw: b}, nil
}

// dataFork is the inode's data fork bytes (before the attribute fork).
func (in Inode) dataFork() []byte {
	end := len(in.raw)
	if forkoff := int(in.raw[82]) * 8; forkoff > 0 && coreSizeV3+forkoff < end {
		end = coreSizeV3 + forkoff
	}
	return in.raw[coreSizeV3:end]
}

// Entry is one short-form directory entry.
type Entry struct {
	Name   string
	Ino    uint64
	Offset int64 // image offset of the entry's namelen byte
	inoLen int
	ftype  bool
}

// Entries lists directory dir's short-form entries.
func (fs *FS) Entries(dir Inode) ([]Entry, error) {
	if !dir.IsDir() {
		return nil, fmt.Errorf("xfs: inode %d is not a directory", dir.Ino)
	}
	if dir.Format != formatLocal {
		return nil, unsupported("directory %d is in format %d (only short form is read)", dir.Ino, dir.Format)
	}
	d := dir.dataFork()
	if len(d) < 6 {
		return nil, corrupt("short-form directory %d of %d bytes", dir.Ino, len(d))
	}
	count, i8 := int(d[0]), d[1] != 0
	inoLen := 4
	if i8 {
		inoLen = 8
	}
	ftype := fs.sb.FeatIncomp&sbFtype != 0
	pos := 2 + inoLen // header: count, i8count, parent
	var out []Entry
	for range count {
		if pos+3 > len(d) {
			return nil, corrupt("short-form directory %d: entry at %d past its %d bytes", dir.Ino, pos, len(d))
		}
		n := int(d[pos])
		end := pos + 3 + n + inoLen
		if ftype {
			end++
		}
		if n == 0 || end > len(d) {
			return nil, corrupt("short-form directory %d: entry of name length %d at %d", dir.Ino, n, pos)
		}
		ip := end - inoLen
		var ino uint64
		if i8 {
			ino = be.Uint64(d[ip:])
		} else {
			ino = uint64(be.Uint32(d[ip:]))
		}
		out = append(out, Entry{Name: string(d[pos+3 : pos+3+n]), Ino: ino, Offset: dir.Offset + coreSizeV3 + int64(pos), inoLen: inoLen, ftype: ftype})
		pos = end
	}
	return out, nil
}

// lookupEntry finds name in directory dir.
func (fs *FS) lookupEntry(dir Inode, name string) (Entry, error) {
	es, err := fs.Entries(dir)
	if err != nil {
		return Entry{}, err
	}
	for _, e := range es {
		if e.Name == name {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("xfs: %q in directory %d: %w", name, dir.Ino, iofs.ErrNotExist)
}

// Lookup returns the inode at path p ("" or "/" the root), relative to the
// root.
func (fs *FS) Lookup(p string) (Inode, error) {
	in, err := fs.Inode(fs.sb.RootIno)
	if err != nil {
		return Inode{}, err
	}
	parts := strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
	if len(parts) > maxDepth {
		return Inode{}, fmt.Errorf("xfs: path %q: %w: deeper than %d", p, fsimage.ErrTooLarge, maxDepth)
	}
	for _, name := range parts {
		e, err := fs.lookupEntry(in, name)
		if err != nil {
			return Inode{}, err
		}
		if in, err = fs.Inode(e.Ino); err != nil {
			return Inode{}, err
		}
	}
	return in, nil
}

// Extent is one extent record of a data fork.
type Extent struct {
	FileBlock, FSBlock, Blocks uint64
	Unwritten                  bool
}

// Extents lists a file's extents (extent format only).
func (fs *FS) Extents(in Inode) ([]Extent, error) {
	if in.Format != formatExtents {
		return nil, unsupported("inode %d's data fork is in format %d (only extent lists are read)", in.Ino, in.Format)
	}
	d := in.dataFork()
	if int(in.NExt) > len(d)/16 {
		return nil, corrupt("inode %d: %d extents in a %d-byte fork", in.Ino, in.NExt, len(d))
	}
	out := make([]Extent, 0, in.NExt)
	for i := range int(in.NExt) {
		hi, lo := be.Uint64(d[i*16:]), be.Uint64(d[i*16+8:])
		out = append(out, Extent{Unwritten: hi>>63 != 0, FileBlock: hi << 1 >> 10, FSBlock: (hi&(1<<9-1))<<43 | lo>>21, Blocks: lo & (1<<21 - 1)})
	}
	return out, nil
}

// FileByte returns the image offset of byte off of the regular file at p.
func (fs *FS) FileByte(p string, off uint64) (int64, error) {
	in, err := fs.Lookup(p)
	if err != nil {
		return 0, err
	}
	if in.Mode&0o170000 != 0o100000 {
		return 0, fmt.Errorf("xfs: %q is not a regular file", p)
	}
	if off >= in.Size {
		return 0, fmt.Errorf("xfs: byte %d of %q: %w (size %d)", off, p, iofs.ErrNotExist, in.Size)
	}
	es, err := fs.Extents(in)
	if err != nil {
		return 0, err
	}
	fb := off >> fs.sb.BlockLog
	for _, e := range es {
		if fb >= e.FileBlock && fb-e.FileBlock < e.Blocks {
			blk, err := fs.blockOffset(e.FSBlock + (fb - e.FileBlock))
			if err != nil {
				return 0, err
			}
			return blk + int64(off&(uint64(fs.sb.BlockSize)-1)), nil
		}
	}
	return 0, fmt.Errorf("xfs: byte %d of %q is in a hole: %w", off, p, iofs.ErrNotExist)
}
