package fsimage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// SectorSize is the size in bytes of the sectors that LBAs count.
const SectorSize = 512

// GroupDesc is one decoded block group descriptor (struct
// ext4_group_desc). Block numbers already combine the _hi halves of 64-byte
// descriptors.
type GroupDesc struct {
	BlockBitmap     uint64 // bg_block_bitmap: block of the block bitmap
	InodeBitmap     uint64 // bg_inode_bitmap: block of the inode bitmap
	InodeTable      uint64 // bg_inode_table: first block of the inode table
	FreeBlocks      uint32 // bg_free_blocks_count
	FreeInodes      uint32 // bg_free_inodes_count
	UsedDirs        uint32 // bg_used_dirs_count
	Flags           uint16 // bg_flags: 1 INODE_UNINIT, 2 BLOCK_UNINIT, 4 ITABLE_ZEROED
	ItableUnused    uint32 // bg_itable_unused: unused inodes at the end of the table (gdt_csum)
	BlockBitmapCsum uint32 // bg_block_bitmap_csum_lo|hi
	InodeBitmapCsum uint32 // bg_inode_bitmap_csum_lo|hi
	Checksum        uint16 // bg_checksum
	// Offset is the byte offset of the primary copy of this descriptor in
	// the image.
	Offset int64
}

// Group descriptor flags (bg_flags).
const (
	BGInodeUninit  = 0x1
	BGBlockUninit  = 0x2
	BGItableZeroed = 0x4
)

// FS is an opened ext2/3/4 image. It is read-only and safe for concurrent
// use when the underlying reader is.
type FS struct {
	r         io.ReaderAt
	size      int64
	sb        Superblock
	bs        int64  // block size in bytes
	descSize  int    // 32 or s_desc_size
	ngroups   uint32 // block groups
	gdtBlocks uint64 // blocks of one group descriptor table copy
	groups    []GroupDesc

	layoutOnce sync.Once
	layout     []Region
}

// Open parses the superblock and group descriptors of the image of size
// bytes read through r. The filesystem must lie within the image.
func Open(r io.ReaderAt, size int64) (*FS, error) {
	if size < SuperblockOffset+SuperblockSize {
		return nil, fmt.Errorf("%w: image of %d bytes has no room for a superblock", ErrCorrupt, size)
	}
	buf := make([]byte, SuperblockSize)
	if err := readFull(r, buf, SuperblockOffset); err != nil {
		return nil, fmt.Errorf("fsimage: read superblock: %w", err)
	}
	sb, err := parseSuperblock(buf)
	if err != nil {
		return nil, err
	}
	fs := &FS{r: r, size: size, sb: sb, bs: int64(sb.BlockSize)}
	if sb.BlocksCount > uint64(size)/uint64(fs.bs) {
		return nil, fmt.Errorf("%w: %d blocks of %d bytes exceed the %d-byte image", ErrCorrupt, sb.BlocksCount, fs.bs, size)
	}
	fs.ngroups = uint32((sb.BlocksCount - uint64(sb.FirstDataBlock) + uint64(sb.BlocksPerGroup) - 1) / uint64(sb.BlocksPerGroup))
	if uint64(sb.InodesCount) > uint64(fs.ngroups)*uint64(sb.InodesPerGroup) {
		return nil, fmt.Errorf("%w: %d inodes exceed %d groups of %d", ErrCorrupt, sb.InodesCount, fs.ngroups, sb.InodesPerGroup)
	}
	fs.descSize = 32
	if sb.Has64Bit() {
		ds := int(sb.DescSize)
		if ds < 64 || ds > 1024 || ds&(ds-1) != 0 {
			return nil, fmt.Errorf("%w: group descriptor size %d with 64bit", ErrCorrupt, ds)
		}
		fs.descSize = ds
	}
	if sb.FeatureIncompat&IncompatMetaBG != 0 {
		return nil, fmt.Errorf("%w: meta_bg", ErrUnsupported)
	}
	// ngroups*descSize is bounded: ngroups <= size/(8*bs) and descSize <= 1024.
	gdtBytes := int64(fs.ngroups) * int64(fs.descSize)
	fs.gdtBlocks = uint64((gdtBytes + fs.bs - 1) / fs.bs)
	gdtBlock := uint64(sb.FirstDataBlock) + 1
	gdtOff := int64(gdtBlock) * fs.bs
	if gdtBlock+fs.gdtBlocks > sb.BlocksCount {
		return nil, fmt.Errorf("%w: group descriptor table (%d blocks at %d) past the filesystem end", ErrCorrupt, fs.gdtBlocks, gdtBlock)
	}
	gdt := make([]byte, gdtBytes)
	if err := readFull(r, gdt, gdtOff); err != nil {
		return nil, fmt.Errorf("fsimage: read group descriptors: %w", err)
	}
	fs.groups = make([]GroupDesc, fs.ngroups)
	itBlocks := fs.inodeTableBlocks()
	for g := range fs.groups {
		d := gdt[g*fs.descSize : (g+1)*fs.descSize]
		gd := parseGroupDesc(d)
		gd.Offset = gdtOff + int64(g*fs.descSize)
		for _, c := range []struct {
			name  string
			blk   uint64
			count uint64
		}{
			{"block bitmap", gd.BlockBitmap, 1},
			{"inode bitmap", gd.InodeBitmap, 1},
			{"inode table", gd.InodeTable, itBlocks},
		} {
			if c.blk < uint64(sb.FirstDataBlock) || c.blk >= sb.BlocksCount || sb.BlocksCount-c.blk < c.count {
				return nil, fmt.Errorf("%w: group %d: %s at block %d (%d blocks) outside the filesystem", ErrCorrupt, g, c.name, c.blk, c.count)
			}
		}
		fs.groups[g] = gd
	}
	return fs, nil
}

func parseGroupDesc(d []byte) GroupDesc {
	le := binary.LittleEndian
	gd := GroupDesc{
		BlockBitmap:     uint64(le.Uint32(d[0:])),
		InodeBitmap:     uint64(le.Uint32(d[4:])),
		InodeTable:      uint64(le.Uint32(d[8:])),
		FreeBlocks:      uint32(le.Uint16(d[0xC:])),
		FreeInodes:      uint32(le.Uint16(d[0xE:])),
		UsedDirs:        uint32(le.Uint16(d[0x10:])),
		Flags:           le.Uint16(d[0x12:]),
		BlockBitmapCsum: uint32(le.Uint16(d[0x18:])),
		InodeBitmapCsum: uint32(le.Uint16(d[0x1A:])),
		ItableUnused:    uint32(le.Uint16(d[0x1C:])),
		Checksum:        le.Uint16(d[0x1E:]),
	}
	if len(d) >= 64 {
		gd.BlockBitmap |= uint64(le.Uint32(d[0x20:])) << 32
		gd.InodeBitmap |= uint64(le.Uint32(d[0x24:])) << 32
		gd.InodeTable |= uint64(le.Uint32(d[0x28:])) << 32
		gd.FreeBlocks |= uint32(le.Uint16(d[0x2C:])) << 16
		gd.FreeInodes |= uint32(le.Uint16(d[0x2E:])) << 16
		gd.UsedDirs |= uint32(le.Uint16(d[0x30:])) << 16
		gd.ItableUnused |= uint32(le.Uint16(d[0x32:])) << 16
		gd.BlockBitmapCsum |= uint32(le.Uint16(d[0x38:])) << 16
		gd.InodeBitmapCsum |= uint32(le.Uint16(d[0x3A:])) << 16
	}
	return gd
}

// readFull reads len(b) bytes at off, turning a short read into ErrCorrupt.
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: short read of %d bytes at offset %d (got %d)", ErrCorrupt, len(b), off, n)
	}
	return err
}

// Superblock returns the decoded primary superblock.
func (fs *FS) Superblock() Superblock { return fs.sb }

// BlockSize returns the block size in bytes.
func (fs *FS) BlockSize() int { return int(fs.bs) }

// Size returns the image size in bytes given to Open.
func (fs *FS) Size() int64 { return fs.size }

// Groups returns a copy of the decoded group descriptors.
func (fs *FS) Groups() []GroupDesc { return append([]GroupDesc(nil), fs.groups...) }

// DescSize returns the size in bytes of one group descriptor (32 or 64+).
func (fs *FS) DescSize() int { return fs.descSize }

// inodeTableBlocks is the length in blocks of one group's inode table.
func (fs *FS) inodeTableBlocks() uint64 {
	return (uint64(fs.sb.InodesPerGroup)*uint64(fs.sb.InodeSize) + uint64(fs.bs) - 1) / uint64(fs.bs)
}

// readBlock reads block blk into a new buffer.
func (fs *FS) readBlock(blk uint64) ([]byte, error) {
	b := make([]byte, fs.bs)
	return b, fs.readBlockInto(b, blk)
}

func (fs *FS) readBlockInto(b []byte, blk uint64) error {
	if blk >= fs.sb.BlocksCount {
		return fmt.Errorf("%w: block %d past the filesystem end (%d blocks)", ErrCorrupt, blk, fs.sb.BlocksCount)
	}
	if err := readFull(fs.r, b[:fs.bs], int64(blk)*fs.bs); err != nil {
		return fmt.Errorf("fsimage: read block %d: %w", blk, err)
	}
	return nil
}

// hasSuperBackup reports whether group g holds a superblock and group
// descriptor table copy.
func (fs *FS) hasSuperBackup(g uint32) bool {
	if g == 0 {
		return true
	}
	if fs.sb.FeatureCompat&CompatSparseSuper2 != 0 {
		return g == fs.sb.BackupBGs[0] || g == fs.sb.BackupBGs[1]
	}
	if fs.sb.FeatureRoCompat&RoCompatSparseSuper == 0 {
		return true
	}
	if g == 1 {
		return true
	}
	for _, p := range []uint32{3, 5, 7} {
		n := uint64(p)
		for n < uint64(g) {
			n *= uint64(p)
		}
		if n == uint64(g) {
			return true
		}
	}
	return false
}

// groupFirstBlock returns the first block of group g.
func (fs *FS) groupFirstBlock(g uint32) uint64 {
	return uint64(fs.sb.FirstDataBlock) + uint64(g)*uint64(fs.sb.BlocksPerGroup)
}
