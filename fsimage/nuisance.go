package fsimage

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// ByteRange is a run of image bytes holding one nuisance field: a value
// that differs between logically identical filesystems (times, random
// identifiers, checksums over them).
type ByteRange struct {
	Offset int64  // byte offset in the image
	Len    int    // bytes
	Field  string // e.g. "s_uuid", "inode 12 i_mtime", "group 0 bg_checksum"
}

type field struct {
	name     string
	off, len int
}

// Superblock nuisance fields, at offsets within a superblock copy.
var superNuisance = []field{
	{"s_mtime", 44, 4},
	{"s_wtime", 48, 4},
	{"s_lastcheck", 64, 4},
	{"s_uuid", 104, 16},
	{"s_hash_seed", 236, 16},
	{"s_mkfs_time", 264, 4},
	{"s_kbytes_written", 376, 8},
	{"s_wtime_hi", 0x274, 1},
	{"s_mtime_hi", 0x275, 1},
	{"s_mkfs_time_hi", 0x276, 1},
	{"s_lastcheck_hi", 0x277, 1},
	{"s_checksum", 1020, 4},
}

// Group descriptor nuisance fields (checksums and flags).
var gdNuisance32 = []field{
	{"bg_flags", 0x12, 2},
	{"bg_block_bitmap_csum_lo", 0x18, 2},
	{"bg_inode_bitmap_csum_lo", 0x1A, 2},
	{"bg_checksum", 0x1E, 2},
}

var gdNuisance64 = []field{
	{"bg_block_bitmap_csum_hi", 0x38, 2},
	{"bg_inode_bitmap_csum_hi", 0x3A, 2},
}

// Inode nuisance fields: the 128-byte base, then the extra fields a
// 256-byte inode has when i_extra_isize covers them.
var inodeNuisance = []field{
	{"i_atime", 8, 4},
	{"i_ctime", 12, 4},
	{"i_mtime", 16, 4},
	{"i_dtime", 20, 4},
	{"i_generation", 100, 4},
}

var inodeCsumNuisance = []field{
	{"i_checksum_lo", 0x7C, 2},
}

var inodeExtraNuisance = []field{
	{"i_checksum_hi", 0x82, 2},
	{"i_ctime_extra", 0x84, 4},
	{"i_mtime_extra", 0x88, 4},
	{"i_atime_extra", 0x8C, 4},
	{"i_crtime", 0x90, 4},
	{"i_crtime_extra", 0x94, 4},
}

// NuisanceRanges lists the bytes of fs's image a normalized diff masks,
// sorted by offset:
//
//   - in every superblock copy: s_mtime, s_wtime, s_lastcheck, s_uuid,
//     s_hash_seed, s_mkfs_time, s_kbytes_written, the *_hi time bytes and
//     s_checksum (and s_checksum_seed with csum_seed);
//   - in every group descriptor table copy: bg_flags, bg_checksum and the
//     bitmap checksums;
//   - in every inode in use (its inode bitmap bit set, or any of i_mode,
//     i_links_count, i_dtime non-zero): i_atime, i_ctime, i_mtime, i_dtime,
//     i_generation; with metadata_csum i_checksum_lo; and the fields past
//     byte 128 that i_extra_isize covers (i_checksum_hi, the *_extra
//     words, i_crtime);
//   - with metadata_csum: the checksum of every directory leaf block tail,
//     htree node tail, extent tree block tail and extended attribute block
//     of those inodes;
//   - with a journal: the journal superblock's s_uuid, and its checksum
//     when the journal has checksums.
//
// Inodes in groups marked INODE_UNINIT, and past bg_itable_unused where
// group descriptors carry checksums, are skipped. Unreadable directory or
// extent blocks of an inode are skipped (their checksums are not masked);
// an error is returned only when the inode tables or bitmaps cannot be
// read.
func NuisanceRanges(fs *FS) ([]ByteRange, error) {
	out := fs.superblockNuisance(nil)
	out, err := fs.inodeTablesNuisance(out)
	if err != nil {
		return nil, err
	}
	sb := &fs.sb
	if sb.FeatureCompat&CompatHasJournal != 0 && sb.JournalInum != 0 {
		out = fs.journalNuisance(out)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out, nil
}

// appendFields appends to out the ranges of fields in the structure at image
// offset base, their names prefixed with prefix.
func appendFields(out []ByteRange, base int64, prefix string, fields []field) []ByteRange {
	for _, f := range fields {
		out = append(out, ByteRange{base + int64(f.off), f.len, prefix + f.name})
	}
	return out
}

// superblockNuisance appends the nuisance ranges of the primary superblock,
// every backup, and the group descriptor table that follows each.
func (fs *FS) superblockNuisance(out []ByteRange) []ByteRange {
	sb := &fs.sb
	sbFields := superNuisance
	if sb.FeatureIncompat&IncompatCsumSeed != 0 {
		sbFields = append(append([]field(nil), superNuisance...), field{"s_checksum_seed", 0x270, 4})
	}
	for g := uint32(0); g < fs.ngroups; g++ {
		if !fs.hasSuperBackup(g) {
			continue
		}
		first := fs.groupFirstBlock(g)
		sbOff := int64(first) * fs.bs
		prefix := ""
		if g == 0 {
			sbOff = SuperblockOffset
		} else {
			prefix = fmt.Sprintf("backup %d ", g)
		}
		out = appendFields(out, sbOff, prefix, sbFields)
		gdt := int64(first+1) * fs.bs
		for i := 0; i < int(fs.ngroups); i++ {
			d := gdt + int64(i*fs.descSize)
			p := fmt.Sprintf("%sgroup %d ", prefix, i)
			out = appendFields(out, d, p, gdNuisance32)
			if fs.descSize >= 64 {
				out = appendFields(out, d, p, gdNuisance64)
			}
		}
	}
	return out
}

// inodeTablesNuisance appends the nuisance ranges of every inode in use,
// reading each initialized group's inode bitmap and table.
func (fs *FS) inodeTablesNuisance(out []ByteRange) ([]ByteRange, error) {
	isz := int64(fs.sb.InodeSize)
	ipg := fs.sb.InodesPerGroup
	bitmap := make([]byte, fs.bs)
	table := make([]byte, int64(fs.inodeTableBlocks())*fs.bs)
	le := binary.LittleEndian
	for g, gd := range fs.groups {
		if fs.sb.HasGdtCsum() && gd.Flags&BGInodeUninit != 0 {
			continue
		}
		n := ipg
		if fs.sb.HasGdtCsum() && gd.ItableUnused <= ipg {
			n = ipg - gd.ItableUnused
		}
		if n == 0 {
			continue
		}
		if err := fs.readBlockInto(bitmap, gd.InodeBitmap); err != nil {
			return nil, fmt.Errorf("fsimage: nuisance: group %d inode bitmap: %w", g, err)
		}
		tb := table[:int64(n)*isz]
		if err := readFull(fs.r, tb, int64(gd.InodeTable)*fs.bs); err != nil {
			return nil, fmt.Errorf("fsimage: nuisance: group %d inode table: %w", g, err)
		}
		for i := uint32(0); i < n; i++ {
			ino := uint64(g)*uint64(ipg) + uint64(i) + 1
			if ino > uint64(fs.sb.InodesCount) {
				break
			}
			raw := tb[int64(i)*isz : int64(i+1)*isz]
			used := bitmap[i/8]&(1<<(i%8)) != 0 ||
				le.Uint16(raw[0:]) != 0 || le.Uint16(raw[26:]) != 0 || le.Uint32(raw[20:]) != 0
			if !used {
				continue
			}
			base := int64(gd.InodeTable)*fs.bs + int64(i)*isz
			out = fs.inodeNuisanceRanges(out, ino, base, raw)
		}
	}
	return out, nil
}

// inodeNuisanceRanges appends the nuisance ranges of inode ino, whose raw on-disk
// bytes raw lie at image offset base: its fixed fields, the extra fields
// its i_extra_isize covers, and with metadata_csum its checksum tails.
func (fs *FS) inodeNuisanceRanges(out []ByteRange, ino uint64, base int64, raw []byte) []ByteRange {
	isz := len(raw)
	csum := fs.sb.HasMetadataCsum()
	prefix := fmt.Sprintf("inode %d ", ino)
	out = appendFields(out, base, prefix, inodeNuisance)
	if csum {
		out = appendFields(out, base, prefix, inodeCsumNuisance)
	}
	if isz > 128 {
		extra := int(binary.LittleEndian.Uint16(raw[inoExtraIsize:]))
		for _, f := range inodeExtraNuisance {
			if f.off+f.len <= 128+extra && f.off+f.len <= isz {
				out = append(out, ByteRange{base + int64(f.off), f.len, prefix + f.name})
			}
		}
	}
	if csum {
		in, err := parseInode(append([]byte(nil), raw...))
		if err != nil {
			return out
		}
		in.Ino = uint32(ino)
		out = fs.csumTails(out, in, prefix)
	}
	return out
}

// csumTails appends the checksum fields of in's metadata blocks:
// directory leaf tails and htree node tails, extent tree block tails, and
// the extended attribute block header.
func (fs *FS) csumTails(out []ByteRange, in *Inode, prefix string) []ByteRange {
	le := binary.LittleEndian
	if in.FileACL != 0 && fs.checkData(in.FileACL, 1) == nil {
		out = append(out, ByteRange{int64(in.FileACL)*fs.bs + 0x10, 4, prefix + "xattr h_checksum"})
	}
	if in.Mode == 0 || in.Links == 0 {
		return out // deleted: its blocks may be reused
	}
	m, err := fs.mapInode(in)
	if err != nil {
		return out
	}
	buf := make([]byte, fs.bs)
	if in.Flags&FlagExtents != 0 {
		for _, blk := range m.meta {
			if fs.readBlockInto(buf, blk) != nil {
				continue
			}
			max := int64(le.Uint16(buf[4:]))
			if o := 12 + 12*max; o+4 <= fs.bs {
				out = append(out, ByteRange{int64(blk)*fs.bs + o, 4, prefix + "extent et_checksum"})
			}
		}
	}
	if !in.IsDir() {
		return out
	}
	n := (in.Size + uint64(fs.bs) - 1) / uint64(fs.bs)
	for _, e := range m.extents {
		for i := uint64(0); i < uint64(e.Len) && e.Logical+i < n; i++ {
			blk := e.Physical + i
			if fs.readBlockInto(buf, blk) != nil {
				continue
			}
			off := int64(blk) * fs.bs
			// countlimit is where an htree root or node keeps its
			// dx_countlimit; 0 for a leaf block.
			countlimit := int64(0)
			switch {
			case e.Logical+i == 0 && in.Flags&FlagIndex != 0:
				countlimit = 0x20 // after ".", ".." and dx_root_info
			case le.Uint32(buf) == 0 && int64(le.Uint16(buf[4:])) == fs.bs:
				countlimit = 8 // after the empty fake dirent
			}
			if countlimit != 0 {
				limit := int64(le.Uint16(buf[countlimit:]))
				if t := countlimit + 8*limit + 4; t+4 <= fs.bs {
					out = append(out, ByteRange{off + t, 4, prefix + "dx_tail dt_checksum"})
				}
				continue
			}
			t := buf[fs.bs-12:]
			if le.Uint32(t) == 0 && le.Uint16(t[4:]) == 12 && t[6] == 0 && t[7] == ftCsumTail {
				out = append(out, ByteRange{off + fs.bs - 4, 4, prefix + "dirent tail det_checksum"})
			}
		}
	}
	return out
}

// Journal superblock fields (big-endian, struct journal_superblock_s).
const (
	jsbMagic           = 0xC03B3998
	jsbFeatureIncompat = 0x28
	jsbUUID            = 0x30
	jsbChecksum        = 0xFC
	jbd2CsumV2V3       = 0x8 | 0x10
)

func (fs *FS) journalNuisance(out []ByteRange) []ByteRange {
	ext, err := fs.Extents(fs.sb.JournalInum)
	if err != nil || len(ext) == 0 || ext[0].Logical != 0 || fs.bs < 1024 {
		return out
	}
	blk := ext[0].Physical
	b, err := fs.readBlock(blk)
	if err != nil {
		return out
	}
	be := binary.BigEndian
	if be.Uint32(b) != jsbMagic {
		return out
	}
	off := int64(blk) * fs.bs
	out = append(out, ByteRange{off + jsbUUID, 16, "journal s_uuid"})
	if be.Uint32(b[jsbFeatureIncompat:])&jbd2CsumV2V3 != 0 {
		out = append(out, ByteRange{off + jsbChecksum, 4, "journal s_checksum"})
	}
	return out
}
