package fsimage

import (
	"sort"
)

// Region kinds.
const (
	KindBoot             = "boot"              // the 1024 bytes before the primary superblock
	KindSuperblock       = "superblock"        // a superblock copy (1024 bytes)
	KindPadding          = "padding"           // the rest of a block holding a superblock copy
	KindGroupDescriptors = "group-descriptors" // a group descriptor table copy
	KindReservedGDT      = "reserved-gdt"      // blocks reserved for GDT growth (resize_inode)
	KindBlockBitmap      = "block-bitmap"
	KindInodeBitmap      = "inode-bitmap"
	KindInodeTable       = "inode-table"
	KindJournal          = "journal" // blocks of the internal journal inode
	KindData             = "data"    // everything else inside the filesystem: file and directory blocks, indirect and extent blocks, free space
	KindUnused           = "unused"  // image bytes past the filesystem's last block
	KindOutside          = "outside" // past the image end (Locate only)
)

// Region is a run of 512-byte sectors holding one kind of structure.
// Group is the block group the structure belongs to (with flex_bg, a
// group's bitmaps and inode table may lie in another group's blocks); it
// is -1 for unused and outside regions.
type Region struct {
	Kind     string
	Group    int
	FirstLBA uint64 // first 512-byte sector
	Sectors  uint64 // length in 512-byte sectors
}

// End returns the sector after the region.
func (r Region) End() uint64 { return r.FirstLBA + r.Sectors }

// Layout partitions the image into regions sorted by FirstLBA, covering
// every sector from 0 to the image end without overlap. Where corrupt
// descriptors make structures overlap, the one starting first keeps the
// shared sectors. The journal is labelled when its inode can be mapped;
// otherwise its blocks are data. The result is computed once and shared:
// callers must not modify it.
func (fs *FS) Layout() []Region {
	fs.layoutOnce.Do(func() { fs.layout = fs.computeLayout() })
	return fs.layout
}

type span struct {
	start, n uint64 // sectors
	kind     string
	group    int
}

func (fs *FS) computeLayout() []Region {
	spb := uint64(fs.bs / SectorSize) // sectors per block
	sb := &fs.sb
	var spans []span
	addBlocks := func(kind string, g int, blk, n uint64) {
		if n == 0 || blk >= sb.BlocksCount {
			return
		}
		n = min(n, sb.BlocksCount-blk)
		spans = append(spans, span{blk * spb, n * spb, kind, g})
	}
	// superblock adds a superblock copy at block blk with its padding.
	superblock := func(g int, blk uint64) {
		start := blk * spb
		if blk == 0 { // 1024 bytes of boot area precede it in block 0
			spans = append(spans, span{0, 2, KindBoot, 0})
			start = 2
		}
		spans = append(spans, span{start, 2, KindSuperblock, g})
		if end := (blk + 1) * spb; end > start+2 {
			spans = append(spans, span{start + 2, end - start - 2, KindPadding, g})
		}
	}
	if sb.FirstDataBlock == 1 {
		spans = append(spans, span{0, 2, KindBoot, 0})
	}
	reserved := uint64(0)
	if sb.FeatureCompat&CompatResizeInode != 0 {
		reserved = uint64(sb.ReservedGdtBlocks)
	}
	it := fs.inodeTableBlocks()
	for i, gd := range fs.groups {
		g := uint32(i)
		if fs.hasSuperBackup(g) {
			first := fs.groupFirstBlock(g)
			superblock(i, first)
			addBlocks(KindGroupDescriptors, i, first+1, fs.gdtBlocks)
			addBlocks(KindReservedGDT, i, first+1+fs.gdtBlocks, reserved)
		}
		addBlocks(KindBlockBitmap, i, gd.BlockBitmap, 1)
		addBlocks(KindInodeBitmap, i, gd.InodeBitmap, 1)
		addBlocks(KindInodeTable, i, gd.InodeTable, it)
	}
	if sb.FeatureCompat&CompatHasJournal != 0 && sb.JournalInum != 0 {
		if ext, err := fs.Extents(sb.JournalInum); err == nil {
			for _, e := range ext {
				addBlocks(KindJournal, fs.groupOf(e.Physical), e.Physical, uint64(e.Len))
			}
		}
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].start < spans[j].start })

	fsEnd := sb.BlocksCount * spb
	imgEnd := (uint64(fs.size) + SectorSize - 1) / SectorSize
	var out []Region
	// data appends data regions for [from, to), split at group starts.
	data := func(from, to uint64) {
		for from < to {
			blk := from / spb
			g := fs.groupOf(blk)
			end := to
			if next := fs.groupFirstBlock(uint32(g)+1) * spb; next > from && next < end {
				end = next
			}
			out = append(out, Region{KindData, g, from, end - from})
			from = end
		}
	}
	cur := uint64(0)
	for _, s := range spans {
		start, end := s.start, s.start+s.n
		if end > fsEnd {
			end = fsEnd
		}
		if start < cur {
			start = cur
		}
		if start >= end {
			continue
		}
		data(cur, start)
		out = append(out, Region{s.kind, s.group, start, end - start})
		cur = end
	}
	data(cur, fsEnd)
	if imgEnd > fsEnd {
		out = append(out, Region{KindUnused, -1, fsEnd, imgEnd - fsEnd})
	}
	return out
}

// groupOf returns the block group holding block blk (0 for blocks before
// the first data block).
func (fs *FS) groupOf(blk uint64) int {
	if blk < uint64(fs.sb.FirstDataBlock) {
		return 0
	}
	return int((blk - uint64(fs.sb.FirstDataBlock)) / uint64(fs.sb.BlocksPerGroup))
}

// Locate returns the region of Layout holding sector lba, or a one-sector
// region of kind "outside" past the image end.
func (fs *FS) Locate(lba uint64) Region {
	l := fs.Layout()
	i := sort.Search(len(l), func(i int) bool { return l[i].End() > lba })
	if i < len(l) && l[i].FirstLBA <= lba {
		return l[i]
	}
	return Region{Kind: KindOutside, Group: -1, FirstLBA: lba, Sectors: 1}
}
