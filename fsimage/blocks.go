package fsimage

import (
	"encoding/binary"
	"fmt"
)

// Bounds on walks over untrusted block maps and extent trees.
const (
	// MaxExtentDepth is the deepest extent tree accepted (the kernel's
	// EXT4_MAX_EXTENT_DEPTH).
	MaxExtentDepth = 5
	// maxMetaBlocks bounds the indirect or extent-node blocks read for one
	// inode.
	maxMetaBlocks = 1 << 16
	// maxBlocksLen bounds the slice Blocks returns (logical blocks).
	maxBlocksLen = 1 << 22
	// extentMagic is eh_magic.
	extentMagic = 0xF30A
	// extentInitMax is the longest initialized extent; longer ee_len values
	// mark uninitialized (preallocated, reads as zeros) extents.
	extentInitMax = 32768
)

// Extent maps Len logical blocks starting at Logical to physical blocks
// starting at Physical. Block-mapped files are reported as runs of
// contiguous blocks.
type Extent struct {
	Logical  uint64 // first logical block (file offset / block size)
	Physical uint64 // first physical block
	Len      uint32 // blocks
	Uninit   bool   // preallocated: reads as zeros
}

// extentHeader is struct ext4_extent_header.
type extentHeader struct {
	Magic   uint16
	Entries uint16
	Max     uint16
	Depth   uint16
}

// extentIndex is struct ext4_extent_idx.
type extentIndex struct {
	Logical uint32
	Leaf    uint64
}

// parseExtentNode decodes one extent tree node (the 60-byte root in
// i_block or a whole block). It validates the header and that entries are
// in logical order; it does not check block numbers against a filesystem.
func parseExtentNode(b []byte) (extentHeader, []Extent, []extentIndex, error) {
	var h extentHeader
	if len(b) < 12 {
		return h, nil, nil, fmt.Errorf("%w: extent node of %d bytes", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	h = extentHeader{Magic: le.Uint16(b), Entries: le.Uint16(b[2:]), Max: le.Uint16(b[4:]), Depth: le.Uint16(b[6:])}
	if h.Magic != extentMagic {
		return h, nil, nil, fmt.Errorf("%w: extent header magic %#04x", ErrCorrupt, h.Magic)
	}
	if h.Depth > MaxExtentDepth {
		return h, nil, nil, fmt.Errorf("%w: extent depth %d", ErrCorrupt, h.Depth)
	}
	if h.Entries > h.Max || 12+12*int(h.Max) > len(b) {
		return h, nil, nil, fmt.Errorf("%w: extent node: %d entries, max %d in %d bytes", ErrCorrupt, h.Entries, h.Max, len(b))
	}
	if h.Depth > 0 {
		idx := make([]extentIndex, h.Entries)
		for i := range idx {
			e := b[12+12*i:]
			idx[i] = extentIndex{Logical: le.Uint32(e), Leaf: uint64(le.Uint32(e[4:])) | uint64(le.Uint16(e[8:]))<<32}
			if i > 0 && idx[i].Logical <= idx[i-1].Logical {
				return h, nil, nil, fmt.Errorf("%w: extent index %d out of order", ErrCorrupt, i)
			}
		}
		return h, nil, idx, nil
	}
	ext := make([]Extent, h.Entries)
	var end uint64
	for i := range ext {
		e := b[12+12*i:]
		l := le.Uint16(e[4:])
		x := Extent{
			Logical:  uint64(le.Uint32(e)),
			Len:      uint32(l),
			Physical: uint64(le.Uint32(e[8:])) | uint64(le.Uint16(e[6:]))<<32,
		}
		if l > extentInitMax {
			x.Len -= extentInitMax
			x.Uninit = true
		}
		if x.Len == 0 {
			return h, nil, nil, fmt.Errorf("%w: extent %d has length 0", ErrCorrupt, i)
		}
		if x.Logical+uint64(x.Len) > 1<<32 {
			return h, nil, nil, fmt.Errorf("%w: extent %d runs past logical block 2^32", ErrCorrupt, i)
		}
		if i > 0 && x.Logical < end {
			return h, nil, nil, fmt.Errorf("%w: extent %d overlaps or is out of order", ErrCorrupt, i)
		}
		end = x.Logical + uint64(x.Len)
		ext[i] = x
	}
	return h, ext, nil, nil
}

// fileMap is the result of walking an inode's block map or extent tree.
type fileMap struct {
	extents []Extent
	meta    []uint64 // indirect blocks or non-root extent nodes, in walk order
	nmapped uint64   // blocks the extents cover
}

// isFastSymlink reports a symlink whose target is stored in i_block.
func (fs *FS) isFastSymlink(in *Inode) bool {
	if !in.IsSymlink() || in.Flags&FlagInlineData != 0 {
		return false
	}
	ea := uint64(0)
	if in.FileACL != 0 {
		ea = uint64(fs.bs / SectorSize)
	}
	return in.Blocks == ea || (in.Blocks == 0 && in.Size < 60)
}

// mapInode walks in's block map or extent tree.
func (fs *FS) mapInode(in *Inode) (*fileMap, error) {
	if in.Flags&FlagInlineData != 0 {
		return nil, fmt.Errorf("%w: inode %d has inline data", ErrUnsupported, in.Ino)
	}
	m := &fileMap{}
	if fs.isFastSymlink(in) {
		return m, nil
	}
	switch in.Mode & ModeTypeMask {
	case ModeChar, ModeBlock, ModeFIFO, ModeSocket:
		return m, nil // i_block holds a device number or nothing
	}
	var err error
	if in.Flags&FlagExtents != 0 {
		err = fs.walkExtents(m, in.Block[:], -1, 0)
	} else {
		err = fs.walkBlockMap(m, in)
	}
	if err != nil {
		return nil, fmt.Errorf("fsimage: inode %d: %w", in.Ino, err)
	}
	return m, nil
}

func (fs *FS) checkData(blk uint64, n uint64) error {
	if blk < uint64(fs.sb.FirstDataBlock) || blk >= fs.sb.BlocksCount || fs.sb.BlocksCount-blk < n {
		return fmt.Errorf("%w: blocks %d+%d outside the filesystem (%d blocks)", ErrCorrupt, blk, n, fs.sb.BlocksCount)
	}
	return nil
}

// checkMeta bounds the metadata blocks one walk reads.
func (fs *FS) checkMeta(m *fileMap) error {
	if uint64(len(m.meta)) >= fs.sb.BlocksCount {
		return fmt.Errorf("%w: more mapping blocks than the filesystem has", ErrCorrupt)
	}
	if len(m.meta) >= maxMetaBlocks {
		return fmt.Errorf("%w: over %d mapping blocks", ErrTooLarge, maxMetaBlocks)
	}
	return nil
}

// walkExtents appends the extents of node (depth want, or any at the root
// when want < 0) to m.
func (fs *FS) walkExtents(m *fileMap, node []byte, want int, level int) error {
	h, ext, idx, err := parseExtentNode(node)
	if err != nil {
		return err
	}
	if want >= 0 && int(h.Depth) != want {
		return fmt.Errorf("%w: extent node at level %d has depth %d, want %d", ErrCorrupt, level, h.Depth, want)
	}
	if h.Depth == 0 {
		for _, e := range ext {
			if err := fs.checkData(e.Physical, uint64(e.Len)); err != nil {
				return err
			}
			if n := len(m.extents); n > 0 && e.Logical < m.extents[n-1].Logical+uint64(m.extents[n-1].Len) {
				return fmt.Errorf("%w: extent at logical %d overlaps the previous leaf", ErrCorrupt, e.Logical)
			}
			m.extents = append(m.extents, e)
			m.nmapped += uint64(e.Len)
		}
		if m.nmapped > fs.sb.BlocksCount {
			return fmt.Errorf("%w: extents map more blocks than the filesystem has", ErrCorrupt)
		}
		return nil
	}
	buf := make([]byte, fs.bs)
	for _, ix := range idx {
		if err := fs.checkMeta(m); err != nil {
			return err
		}
		if err := fs.checkData(ix.Leaf, 1); err != nil {
			return err
		}
		m.meta = append(m.meta, ix.Leaf)
		if err := fs.readBlockInto(buf, ix.Leaf); err != nil {
			return err
		}
		if err := fs.walkExtents(m, buf, int(h.Depth)-1, level+1); err != nil {
			return err
		}
	}
	return nil
}

// walkBlockMap walks i_block as 12 direct, one indirect, one double and
// one triple indirect pointer, up to the blocks i_size covers.
func (fs *FS) walkBlockMap(m *fileMap, in *Inode) error {
	le := binary.LittleEndian
	per := uint64(fs.bs / 4)
	nblocks := (in.Size + uint64(fs.bs) - 1) / uint64(fs.bs)
	if max := 12 + per + per*per + per*per*per; nblocks > max {
		nblocks = max
	}
	add := func(logical, phys uint64) error {
		if err := fs.checkData(phys, 1); err != nil {
			return err
		}
		if n := len(m.extents); n > 0 {
			last := &m.extents[n-1]
			if last.Logical+uint64(last.Len) == logical && last.Physical+uint64(last.Len) == phys && last.Len < 1<<31 {
				last.Len++
				return nil
			}
		}
		m.extents = append(m.extents, Extent{Logical: logical, Physical: phys, Len: 1})
		return nil
	}
	var mapped uint64
	// walk maps the subtree under pointer ptr of the given level (0: data)
	// whose first logical block is base.
	var walk func(ptr uint64, level int, base uint64) error
	walk = func(ptr uint64, level int, base uint64) error {
		if ptr == 0 || base >= nblocks {
			return nil
		}
		if level == 0 {
			mapped++
			if mapped > fs.sb.BlocksCount {
				return fmt.Errorf("%w: block map maps more blocks than the filesystem has", ErrCorrupt)
			}
			return add(base, ptr)
		}
		if err := fs.checkMeta(m); err != nil {
			return err
		}
		if err := fs.checkData(ptr, 1); err != nil {
			return err
		}
		m.meta = append(m.meta, ptr)
		b, err := fs.readBlock(ptr)
		if err != nil {
			return err
		}
		span := uint64(1)
		for i := 1; i < level; i++ {
			span *= per
		}
		for i := uint64(0); i < per && base+i*span < nblocks; i++ {
			if err := walk(uint64(le.Uint32(b[4*i:])), level-1, base+i*span); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 0; i < 12; i++ {
		if err := walk(uint64(le.Uint32(in.Block[4*i:])), 0, uint64(i)); err != nil {
			return err
		}
	}
	base := uint64(12)
	span := per
	for level := 1; level <= 3; level++ {
		if err := walk(uint64(le.Uint32(in.Block[4*(11+level):])), level, base); err != nil {
			return err
		}
		base += span
		span *= per
	}
	return nil
}

// Extents returns the logical-to-physical mapping of inode ino's data,
// in logical order, from its block map or extent tree. Fast symlinks and
// device files have none.
func (fs *FS) Extents(ino uint32) ([]Extent, error) {
	in, err := fs.Inode(ino)
	if err != nil {
		return nil, err
	}
	m, err := fs.mapInode(in)
	if err != nil {
		return nil, err
	}
	return m.extents, nil
}

// MetaBlocks returns the indirect blocks (block maps) or non-root extent
// tree nodes of inode ino.
func (fs *FS) MetaBlocks(ino uint32) ([]uint64, error) {
	in, err := fs.Inode(ino)
	if err != nil {
		return nil, err
	}
	m, err := fs.mapInode(in)
	if err != nil {
		return nil, err
	}
	return m.meta, nil
}

// Blocks returns inode ino's data blocks indexed by logical block: element
// i is the physical block holding file bytes [i*bs, (i+1)*bs), 0 for a hole.
// The slice ends at the last mapped block. Preallocated (uninitialized)
// extents are included. Files whose last mapped logical block is past
// 4 Mi blocks fail with ErrTooLarge; use Extents for them.
func (fs *FS) Blocks(ino uint32) ([]uint64, error) {
	ext, err := fs.Extents(ino)
	if err != nil {
		return nil, err
	}
	if len(ext) == 0 {
		return nil, nil
	}
	last := ext[len(ext)-1]
	n := last.Logical + uint64(last.Len)
	if n > maxBlocksLen {
		return nil, fmt.Errorf("fsimage: blocks of inode %d: %w: %d logical blocks", ino, ErrTooLarge, n)
	}
	out := make([]uint64, n)
	for _, e := range ext {
		for i := uint64(0); i < uint64(e.Len); i++ {
			out[e.Logical+i] = e.Physical + i
		}
	}
	return out, nil
}

// ReadFile returns the content of inode ino: i_size bytes, holes and
// preallocated extents read as zeros, a fast symlink's target from i_block.
// It fails with ErrTooLarge when i_size exceeds max bytes.
func (fs *FS) ReadFile(ino uint32, max int64) ([]byte, error) {
	in, err := fs.Inode(ino)
	if err != nil {
		return nil, err
	}
	if max < 0 || in.Size > uint64(max) {
		return nil, fmt.Errorf("fsimage: read inode %d: %w: %d bytes, limit %d", ino, ErrTooLarge, in.Size, max)
	}
	if fs.isFastSymlink(in) {
		if in.Size > uint64(len(in.Block)) {
			return nil, fmt.Errorf("%w: fast symlink %d of %d bytes", ErrCorrupt, ino, in.Size)
		}
		return append([]byte(nil), in.Block[:in.Size]...), nil
	}
	m, err := fs.mapInode(in)
	if err != nil {
		return nil, err
	}
	out := make([]byte, in.Size)
	bs := uint64(fs.bs)
	for _, e := range m.extents {
		if e.Uninit {
			continue
		}
		for i := uint64(0); i < uint64(e.Len); i++ {
			start := (e.Logical + i) * bs
			if start >= in.Size {
				break
			}
			end := min(start+bs, in.Size)
			if err := readFull(fs.r, out[start:end], int64(e.Physical+i)*fs.bs); err != nil {
				return nil, fmt.Errorf("fsimage: read inode %d block %d: %w", ino, e.Logical+i, err)
			}
		}
	}
	return out, nil
}
