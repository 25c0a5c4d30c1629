package fsimage

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// SuperblockOffset is the byte offset of the primary superblock in the
// image; SuperblockSize is its size in bytes.
const (
	SuperblockOffset = 1024
	SuperblockSize   = 1024
)

// Magic is the ext2/3/4 superblock magic number (s_magic).
const Magic = 0xEF53

// Feature bits (s_feature_compat, s_feature_incompat, s_feature_ro_compat).
const (
	CompatDirPrealloc    = 0x0001
	CompatImagicInodes   = 0x0002
	CompatHasJournal     = 0x0004
	CompatExtAttr        = 0x0008
	CompatResizeInode    = 0x0010
	CompatDirIndex       = 0x0020
	CompatSparseSuper2   = 0x0200
	CompatFastCommit     = 0x0400
	CompatStableInodes   = 0x0800
	CompatOrphanFile     = 0x1000
	IncompatCompression  = 0x0001
	IncompatFiletype     = 0x0002
	IncompatRecover      = 0x0004
	IncompatJournalDev   = 0x0008
	IncompatMetaBG       = 0x0010
	IncompatExtents      = 0x0040
	Incompat64Bit        = 0x0080
	IncompatMMP          = 0x0100
	IncompatFlexBG       = 0x0200
	IncompatEAInode      = 0x0400
	IncompatDirData      = 0x1000
	IncompatCsumSeed     = 0x2000
	IncompatLargeDir     = 0x4000
	IncompatInlineData   = 0x8000
	IncompatEncrypt      = 0x10000
	IncompatCasefold     = 0x20000
	RoCompatSparseSuper  = 0x0001
	RoCompatLargeFile    = 0x0002
	RoCompatHugeFile     = 0x0008
	RoCompatGdtCsum      = 0x0010
	RoCompatDirNlink     = 0x0020
	RoCompatExtraIsize   = 0x0040
	RoCompatQuota        = 0x0100
	RoCompatBigalloc     = 0x0200
	RoCompatMetadataCsum = 0x0400
)

// incompatKnown are the incompat features Open accepts; any other bit set
// makes Open fail with ErrUnsupported.
const incompatKnown = IncompatFiletype | IncompatRecover | IncompatExtents |
	Incompat64Bit | IncompatMMP | IncompatFlexBG | IncompatEAInode |
	IncompatCsumSeed | IncompatLargeDir | IncompatInlineData |
	IncompatEncrypt | IncompatCasefold

// Superblock is the decoded ext2/3/4 superblock (struct ext4_super_block).
// Counts that have _hi halves on 64bit filesystems are already combined.
type Superblock struct {
	InodesCount       uint32 // s_inodes_count: inodes in the filesystem
	BlocksCount       uint64 // s_blocks_count_lo|hi: blocks in the filesystem
	RBlocksCount      uint64 // s_r_blocks_count_lo|hi: blocks reserved for root
	FreeBlocksCount   uint64 // s_free_blocks_count_lo|hi: free blocks
	FreeInodesCount   uint32 // s_free_inodes_count: free inodes
	FirstDataBlock    uint32 // s_first_data_block: block number of block group 0's first block (1 for 1 KiB blocks, else 0)
	LogBlockSize      uint32 // s_log_block_size: block size is 1024 << LogBlockSize bytes
	BlockSize         uint32 // derived: block size in bytes
	BlocksPerGroup    uint32 // s_blocks_per_group: blocks per block group
	InodesPerGroup    uint32 // s_inodes_per_group: inodes per block group
	Mtime             uint32 // s_mtime: last mount time, Unix seconds (low 32 bits)
	Wtime             uint32 // s_wtime: last write time, Unix seconds (low 32 bits)
	MntCount          uint16 // s_mnt_count: mounts since the last check
	Magic             uint16 // s_magic: 0xEF53
	State             uint16 // s_state: 1 clean, 2 errors, 4 orphans being recovered
	Errors            uint16 // s_errors: behaviour on error (1 continue, 2 remount-ro, 3 panic)
	MinorRevLevel     uint16 // s_minor_rev_level
	Lastcheck         uint32 // s_lastcheck: last fsck time, Unix seconds (low 32 bits)
	CreatorOS         uint32 // s_creator_os: 0 Linux
	RevLevel          uint32 // s_rev_level: 0 original (128-byte inodes), 1 dynamic
	FirstIno          uint32 // s_first_ino: first non-reserved inode (11 for rev 0)
	InodeSize         uint16 // s_inode_size: bytes per on-disk inode (128 for rev 0)
	BlockGroupNr      uint16 // s_block_group_nr: group holding this superblock copy
	FeatureCompat     uint32 // s_feature_compat: Compat* bits
	FeatureIncompat   uint32 // s_feature_incompat: Incompat* bits
	FeatureRoCompat   uint32 // s_feature_ro_compat: RoCompat* bits
	UUID              [16]byte
	VolumeName        string    // s_volume_name, up to the first NUL (16 bytes at most)
	LastMounted       string    // s_last_mounted, up to the first NUL (64 bytes at most)
	ReservedGdtBlocks uint16    // s_reserved_gdt_blocks: blocks kept after each GDT copy for online resize
	JournalInum       uint32    // s_journal_inum: journal inode (0: none)
	HashSeed          [16]byte  // s_hash_seed: htree directory hash seed
	DefHashVersion    uint8     // s_def_hash_version
	DescSize          uint16    // s_desc_size as stored (0 unless 64bit)
	MkfsTime          uint32    // s_mkfs_time: creation time, Unix seconds (low 32 bits)
	MinExtraIsize     uint16    // s_min_extra_isize: bytes every inode has past 128
	WantExtraIsize    uint16    // s_want_extra_isize: bytes new inodes get past 128
	Flags             uint32    // s_flags: 1 signed hash, 2 unsigned hash, 4 test fs
	LogGroupsPerFlex  uint8     // s_log_groups_per_flex: flex_bg groups per flex group = 1 << this
	ChecksumType      uint8     // s_checksum_type: 1 crc32c
	KbytesWritten     uint64    // s_kbytes_written: KiB written over the filesystem's lifetime
	BackupBGs         [2]uint32 // s_backup_bgs: groups holding backups with sparse_super2
	ChecksumSeed      uint32    // s_checksum_seed (with csum_seed)
	Checksum          uint32    // s_checksum: crc32c of the superblock (metadata_csum)
}

// Has64Bit reports the 64bit incompat feature.
func (s *Superblock) Has64Bit() bool { return s.FeatureIncompat&Incompat64Bit != 0 }

// HasMetadataCsum reports the metadata_csum ro_compat feature.
func (s *Superblock) HasMetadataCsum() bool { return s.FeatureRoCompat&RoCompatMetadataCsum != 0 }

// HasGdtCsum reports uninit_bg (gdt_csum) or metadata_csum: group
// descriptors carry checksums and bg_itable_unused is meaningful.
func (s *Superblock) HasGdtCsum() bool {
	return s.FeatureRoCompat&(RoCompatGdtCsum|RoCompatMetadataCsum) != 0
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// parseSuperblock decodes a 1024-byte superblock and checks the fields the
// rest of the package relies on. It does not check the fields against an
// image size.
func parseSuperblock(b []byte) (Superblock, error) {
	var s Superblock
	if len(b) < SuperblockSize {
		return s, fmt.Errorf("%w: superblock: %d bytes, need %d", ErrCorrupt, len(b), SuperblockSize)
	}
	s.Magic = binary.LittleEndian.Uint16(b[56:])
	if s.Magic != Magic {
		return s, fmt.Errorf("%w: superblock: magic %#04x, want %#04x", ErrCorrupt, s.Magic, Magic)
	}
	decodeSuperblockFields(&s, b)

	// Geometry checks, after the kernel's ext4_fill_super.
	if s.LogBlockSize > 6 {
		return s, fmt.Errorf("%w: superblock: s_log_block_size %d (block size over 64 KiB)", ErrCorrupt, s.LogBlockSize)
	}
	s.BlockSize = 1024 << s.LogBlockSize
	return s, s.checkGeometry()
}

// decodeSuperblockFields fills s from the on-disk fields of the
// SuperblockSize bytes b (all but Magic and BlockSize), defaulting the
// revision-0 ones and joining the 64-bit block counts' high halves.
func decodeSuperblockFields(s *Superblock, b []byte) {
	le := binary.LittleEndian
	u16 := func(o int) uint16 { return le.Uint16(b[o:]) }
	u32 := func(o int) uint32 { return le.Uint32(b[o:]) }
	s.InodesCount = u32(0)
	s.BlocksCount = uint64(u32(4))
	s.RBlocksCount = uint64(u32(8))
	s.FreeBlocksCount = uint64(u32(12))
	s.FreeInodesCount = u32(16)
	s.FirstDataBlock = u32(20)
	s.LogBlockSize = u32(24)
	s.BlocksPerGroup = u32(32)
	s.InodesPerGroup = u32(40)
	s.Mtime = u32(44)
	s.Wtime = u32(48)
	s.MntCount = u16(52)
	s.State = u16(58)
	s.Errors = u16(60)
	s.MinorRevLevel = u16(62)
	s.Lastcheck = u32(64)
	s.CreatorOS = u32(72)
	s.RevLevel = u32(76)
	if s.RevLevel == 0 {
		s.FirstIno = 11
		s.InodeSize = 128
	} else {
		s.FirstIno = u32(84)
		s.InodeSize = u16(88)
		s.BlockGroupNr = u16(90)
		s.FeatureCompat = u32(92)
		s.FeatureIncompat = u32(96)
		s.FeatureRoCompat = u32(100)
	}
	copy(s.UUID[:], b[104:120])
	s.VolumeName = cstring(b[120:136])
	s.LastMounted = cstring(b[136:200])
	s.ReservedGdtBlocks = u16(206)
	s.JournalInum = u32(224)
	copy(s.HashSeed[:], b[236:252])
	s.DefHashVersion = b[252]
	s.DescSize = u16(254)
	s.MkfsTime = u32(264)
	s.MinExtraIsize = u16(348)
	s.WantExtraIsize = u16(350)
	s.Flags = u32(352)
	s.LogGroupsPerFlex = b[372]
	s.ChecksumType = b[373]
	s.KbytesWritten = le.Uint64(b[376:])
	s.BackupBGs = [2]uint32{u32(0x24C), u32(0x250)}
	s.ChecksumSeed = u32(0x270)
	s.Checksum = u32(0x3FC)
	if s.Has64Bit() {
		s.BlocksCount |= uint64(u32(336)) << 32
		s.RBlocksCount |= uint64(u32(340)) << 32
		s.FreeBlocksCount |= uint64(u32(344)) << 32
	}
}

// checkGeometry reports the first revision, feature or geometry field of a
// decoded superblock (BlockSize set) that the package does not support or
// that the kernel's ext4_fill_super would refuse.
func (s *Superblock) checkGeometry() error {
	bs := s.BlockSize
	if s.RevLevel > 1 {
		return fmt.Errorf("%w: superblock: revision %d", ErrUnsupported, s.RevLevel)
	}
	if bad := s.FeatureIncompat &^ incompatKnown; bad != 0 {
		return fmt.Errorf("%w: incompat features %#x", ErrUnsupported, bad)
	}
	if s.FeatureRoCompat&RoCompatBigalloc != 0 {
		return fmt.Errorf("%w: bigalloc", ErrUnsupported)
	}
	is := uint32(s.InodeSize)
	if is < 128 || is > bs || is&(is-1) != 0 {
		return fmt.Errorf("%w: superblock: inode size %d with %d-byte blocks", ErrCorrupt, is, bs)
	}
	if s.BlocksPerGroup < 8 || s.BlocksPerGroup > 8*bs || s.BlocksPerGroup%8 != 0 {
		return fmt.Errorf("%w: superblock: %d blocks per group", ErrCorrupt, s.BlocksPerGroup)
	}
	if s.InodesPerGroup < 1 || s.InodesPerGroup > 8*bs {
		return fmt.Errorf("%w: superblock: %d inodes per group", ErrCorrupt, s.InodesPerGroup)
	}
	if want := uint32(0); bs == 1024 {
		want = 1
		if s.FirstDataBlock != want {
			return fmt.Errorf("%w: superblock: first data block %d with 1 KiB blocks", ErrCorrupt, s.FirstDataBlock)
		}
	} else if s.FirstDataBlock != want {
		return fmt.Errorf("%w: superblock: first data block %d with %d-byte blocks", ErrCorrupt, s.FirstDataBlock, bs)
	}
	if s.BlocksCount <= uint64(s.FirstDataBlock) {
		return fmt.Errorf("%w: superblock: %d blocks", ErrCorrupt, s.BlocksCount)
	}
	if s.FirstIno < 11 && s.RevLevel > 0 {
		return fmt.Errorf("%w: superblock: first inode %d", ErrCorrupt, s.FirstIno)
	}
	return nil
}
