package fsimage

import (
	"encoding/binary"
	"fmt"
)

// Inode mode file types (the S_IFMT bits of Inode.Mode).
const (
	ModeTypeMask = 0xF000
	ModeFIFO     = 0x1000
	ModeChar     = 0x2000
	ModeDir      = 0x4000
	ModeBlock    = 0x6000
	ModeRegular  = 0x8000
	ModeSymlink  = 0xA000
	ModeSocket   = 0xC000
)

// Inode flags (i_flags).
const (
	FlagIndex      = 0x00001000 // EXT4_INDEX_FL: hashed (htree) directory
	FlagHugeFile   = 0x00040000 // EXT4_HUGE_FILE_FL
	FlagExtents    = 0x00080000 // EXT4_EXTENTS_FL: i_block holds an extent tree
	FlagEAInode    = 0x00200000 // EXT4_EA_INODE_FL
	FlagInlineData = 0x10000000 // EXT4_INLINE_DATA_FL
)

// RootIno is the inode number of the root directory.
const RootIno = 2

// Timestamp is one inode time. For 256-byte inodes whose i_extra_isize
// covers the field, Extra holds the *_extra word: its low 2 bits extend the
// seconds past 2038 (epoch bits) and its upper 30 bits are nanoseconds.
type Timestamp struct {
	Sec      int64  // seconds since the Unix epoch, decoded as the kernel does
	Nsec     uint32 // nanoseconds (0 without an extra field)
	Raw32    uint32 // the 32-bit on-disk seconds field as stored
	Extra    uint32 // the *_extra word as stored (0 when HasExtra is false)
	HasExtra bool   // the inode has room for this time's *_extra word
}

func decodeTime(raw, extra uint32, has bool) Timestamp {
	t := Timestamp{Sec: int64(int32(raw)), Raw32: raw}
	if has {
		t.Extra = extra
		t.HasExtra = true
		t.Sec += int64(extra&3) << 32
		t.Nsec = extra >> 2
	}
	return t
}

// Inode is one decoded on-disk inode (struct ext4_inode).
type Inode struct {
	Ino        uint32
	Mode       uint16 // i_mode: file type (ModeTypeMask) and permission bits
	UID        uint32 // i_uid | l_i_uid_high<<16
	GID        uint32 // i_gid | l_i_gid_high<<16
	Size       uint64 // i_size_lo | i_size_high<<32, bytes
	Links      uint16 // i_links_count
	Blocks     uint64 // i_blocks_lo | l_i_blocks_high<<32, in 512-byte units (or fs blocks with HUGE_FILE_FL)
	Flags      uint32 // i_flags: Flag* bits
	Atime      Timestamp
	Ctime      Timestamp
	Mtime      Timestamp
	Crtime     Timestamp // zero unless the inode has room for i_crtime
	Dtime      uint32    // i_dtime: deletion time, Unix seconds
	Generation uint32    // i_generation: NFS file version
	FileACL    uint64    // i_file_acl_lo|high: block of the extended attribute block (0: none)
	ExtraIsize uint16    // i_extra_isize: bytes used past the first 128 (0 for 128-byte inodes)
	Checksum   uint32    // l_i_checksum_lo | i_checksum_hi<<16 (metadata_csum)
	// Block is i_block as stored: 15 block pointers, an extent tree root,
	// a fast symlink target or inline data.
	Block [60]byte
	// LBA and Offset locate the inode on disk: it starts Offset bytes into
	// 512-byte sector LBA.
	LBA    uint64
	Offset int
	// Raw is the whole on-disk inode (Superblock().InodeSize bytes).
	Raw []byte
}

// IsDir reports a directory.
func (in *Inode) IsDir() bool { return in.Mode&ModeTypeMask == ModeDir }

// IsRegular reports a regular file.
func (in *Inode) IsRegular() bool { return in.Mode&ModeTypeMask == ModeRegular }

// IsSymlink reports a symbolic link.
func (in *Inode) IsSymlink() bool { return in.Mode&ModeTypeMask == ModeSymlink }

// Inode field offsets within the on-disk inode.
const (
	inoExtraIsize = 0x80
)

// inodeOffset returns the byte offset of inode ino in the image.
func (fs *FS) inodeOffset(ino uint32) (int64, error) {
	if ino == 0 || ino > fs.sb.InodesCount {
		return 0, fmt.Errorf("%w: inode %d out of range 1..%d", ErrCorrupt, ino, fs.sb.InodesCount)
	}
	g := (ino - 1) / fs.sb.InodesPerGroup
	idx := (ino - 1) % fs.sb.InodesPerGroup
	if g >= fs.ngroups {
		return 0, fmt.Errorf("%w: inode %d in group %d of %d", ErrCorrupt, ino, g, fs.ngroups)
	}
	// Open checked the whole table lies within the filesystem.
	return int64(fs.groups[g].InodeTable)*fs.bs + int64(idx)*int64(fs.sb.InodeSize), nil
}

// InodeLocation returns where inode ino lives: it starts off bytes into the
// 512-byte sector lba.
func (fs *FS) InodeLocation(ino uint32) (lba uint64, off int, err error) {
	o, err := fs.inodeOffset(ino)
	if err != nil {
		return 0, 0, err
	}
	return uint64(o / SectorSize), int(o % SectorSize), nil
}

// Inode reads and decodes inode ino. It does not require the inode to be
// in use.
func (fs *FS) Inode(ino uint32) (*Inode, error) {
	o, err := fs.inodeOffset(ino)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, fs.sb.InodeSize)
	if err := readFull(fs.r, raw, o); err != nil {
		return nil, fmt.Errorf("fsimage: read inode %d: %w", ino, err)
	}
	in, err := parseInode(raw)
	if err != nil {
		return nil, fmt.Errorf("fsimage: inode %d: %w", ino, err)
	}
	in.Ino = ino
	in.LBA = uint64(o / SectorSize)
	in.Offset = int(o % SectorSize)
	return in, nil
}

// parseInode decodes an on-disk inode of len(raw) bytes (128 or more).
func parseInode(raw []byte) (*Inode, error) {
	if len(raw) < 128 {
		return nil, fmt.Errorf("%w: inode of %d bytes", ErrCorrupt, len(raw))
	}
	le := binary.LittleEndian
	u16 := func(o int) uint16 { return le.Uint16(raw[o:]) }
	u32 := func(o int) uint32 { return le.Uint32(raw[o:]) }
	in := &Inode{
		Mode:       u16(0),
		UID:        uint32(u16(2)) | uint32(u16(0x78))<<16,
		Size:       uint64(u32(4)) | uint64(u32(0x6C))<<32,
		Dtime:      u32(20),
		GID:        uint32(u16(24)) | uint32(u16(0x7A))<<16,
		Links:      u16(26),
		Blocks:     uint64(u32(28)) | uint64(u16(0x74))<<32,
		Flags:      u32(32),
		Generation: u32(100),
		FileACL:    uint64(u32(0x68)) | uint64(u16(0x76))<<32,
		Checksum:   uint32(u16(0x7C)),
		Raw:        raw,
	}
	copy(in.Block[:], raw[40:100])
	// extra reports whether the inode has room for the field at off of n
	// bytes past the 128-byte base.
	extraEnd := 128
	if len(raw) > 128 {
		in.ExtraIsize = u16(inoExtraIsize)
		e := 128 + int(in.ExtraIsize)
		if in.ExtraIsize&3 != 0 || e > len(raw) {
			return nil, fmt.Errorf("%w: i_extra_isize %d in a %d-byte inode", ErrCorrupt, in.ExtraIsize, len(raw))
		}
		extraEnd = e
	}
	has := func(off, n int) bool { return off+n <= extraEnd }
	x := func(off int) uint32 {
		if has(off, 4) {
			return u32(off)
		}
		return 0
	}
	if has(0x82, 2) {
		in.Checksum |= uint32(u16(0x82)) << 16
	}
	in.Ctime = decodeTime(u32(12), x(0x84), has(0x84, 4))
	in.Mtime = decodeTime(u32(16), x(0x88), has(0x88, 4))
	in.Atime = decodeTime(u32(8), x(0x8C), has(0x8C, 4))
	if has(0x90, 4) {
		in.Crtime = decodeTime(u32(0x90), x(0x94), has(0x94, 4))
	}
	return in, nil
}
