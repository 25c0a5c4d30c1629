package nilfs2

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/themisfs/themis/fsimage"
)

// The on-disk superblock (struct nilfs_super_block, little-endian), as
// far as Pin needs it.
const (
	// Magic is s_magic.
	Magic = 0x3434
	// SuperOffset is the primary superblock's byte offset.
	SuperOffset = 1024
	// superSpan is the room a superblock has; s_bytes must fit in it.
	superSpan = 1024

	offMagic = 6  // s_magic, le16
	offBytes = 8  // s_bytes, le16: the bytes the checksum covers
	offSeed  = 12 // s_crc_seed, le32
	offSum   = 16 // s_sum, le32
	offUUID  = 152
	uuidEnd  = offUUID + 16
	// minImage is the smallest image with room for both superblocks
	// apart: the secondary lies in the last whole 4 KiB block.
	minImage = 2 * 4096
)

// ReadWriterAt is an image Pin can rewrite.
type ReadWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

// Super is one checked superblock copy.
type Super struct {
	Offset int64    // byte offset in the image
	UUID   [16]byte // s_uuid
	raw    []byte   // s_bytes bytes
}

func corrupt(format string, a ...any) error {
	return fmt.Errorf("nilfs2: %w: %s", fsimage.ErrCorrupt, fmt.Sprintf(format, a...))
}

// SecondaryOffset is where the kernel looks for the secondary superblock
// of an image of size bytes: the start of its last whole 4 KiB block.
func SecondaryOffset(size int64) int64 { return (size>>12 - 1) << 12 }

// Supers reads and checks both superblock copies of the image r of size
// bytes, primary first.
func Supers(r io.ReaderAt, size int64) ([]Super, error) {
	if size < minImage {
		return nil, corrupt("image of %d bytes is too small for two superblocks", size)
	}
	var out []Super
	for _, off := range []int64{SuperOffset, SecondaryOffset(size)} {
		s, err := readSuper(r, off)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// readSuper reads the superblock at off and checks its magic, length and
// checksum.
func readSuper(r io.ReaderAt, off int64) (Super, error) {
	b := make([]byte, superSpan)
	if _, err := r.ReadAt(b, off); err != nil {
		return Super{}, fmt.Errorf("nilfs2: superblock at %d: %w", off, err)
	}
	if m := binary.LittleEndian.Uint16(b[offMagic:]); m != Magic {
		return Super{}, corrupt("superblock at %d: magic %#x, want %#x", off, m, Magic)
	}
	n := int(binary.LittleEndian.Uint16(b[offBytes:]))
	if n < uuidEnd || n > superSpan {
		return Super{}, corrupt("superblock at %d: s_bytes %d outside [%d, %d]", off, n, uuidEnd, superSpan)
	}
	s := Super{Offset: off, raw: b[:n]}
	if got, want := binary.LittleEndian.Uint32(b[offSum:]), s.sum(); got != want {
		return Super{}, corrupt("superblock at %d: checksum %#x, computed %#x", off, got, want)
	}
	copy(s.UUID[:], b[offUUID:uuidEnd])
	return s, nil
}

// sum is the superblock's checksum as the kernel computes it
// (nilfs_sb_sum): crc32_le seeded with s_crc_seed over s_bytes bytes with
// s_sum taken as zero. crc32_le has no inversions; hash/crc32's Update
// inverts on entry and exit.
func (s Super) sum() uint32 {
	seed := binary.LittleEndian.Uint32(s.raw[offSeed:])
	c := crc32.Update(^seed, crc32.IEEETable, s.raw[:offSum])
	c = crc32.Update(c, crc32.IEEETable, make([]byte, 4))
	return ^crc32.Update(c, crc32.IEEETable, s.raw[offSum+4:])
}

// Pin writes uuid into both superblocks of the image f of size bytes and
// computes their checksums again. It checks both copies before writing
// either, and reads them back after.
func Pin(f ReadWriterAt, size int64, uuid [16]byte) error {
	supers, err := Supers(f, size)
	if err != nil {
		return fmt.Errorf("nilfs2: pin: %w", err)
	}
	for _, s := range supers {
		copy(s.raw[offUUID:uuidEnd], uuid[:])
		binary.LittleEndian.PutUint32(s.raw[offSum:], s.sum())
		if _, err := f.WriteAt(s.raw, s.Offset); err != nil {
			return fmt.Errorf("nilfs2: pin: write superblock at %d: %w", s.Offset, err)
		}
	}
	again, err := Supers(f, size)
	if err != nil {
		return fmt.Errorf("nilfs2: pin: the pinned image: %w", err)
	}
	for _, s := range again {
		if s.UUID != uuid {
			return fmt.Errorf("nilfs2: pin: superblock at %d reads back UUID %x", s.Offset, s.UUID)
		}
	}
	return nil
}
