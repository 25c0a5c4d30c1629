package btrfs

import "sort"

// SectorSize is the unit of Region: a 512-byte sector.
const SectorSize = 512

// Region kinds.
const (
	KindSuperblock  = "superblock"    // a superblock copy (64 KiB, 64 MiB, 256 GiB)
	KindSystem      = "system"        // a system chunk's stripe: the chunk tree
	KindMetadata    = "metadata"      // a metadata chunk's stripe: tree blocks
	KindData        = "data"          // a data chunk's stripe: file extents
	KindMixed       = "data+metadata" // a mixed block group's stripe (mkfs.btrfs --mixed)
	KindUnallocated = "unallocated"   // no chunk (includes the first MiB before the first chunk)
	KindOutside     = "outside"       // past the image end (Locate only)
)

// SuperblockCopies are the byte offsets of the superblock and its mirrors.
var SuperblockCopies = []int64{SuperblockOffset, 64 << 20, 256 << 30}

// Region is a run of 512-byte sectors holding one kind of structure.
type Region struct {
	Kind     string
	FirstLBA uint64
	Sectors  uint64
}

// End returns the sector after the region.
func (r Region) End() uint64 { return r.FirstLBA + r.Sectors }

// Layout partitions the image into regions sorted by FirstLBA, covering
// every sector without overlap: superblock copies, then chunk stripes
// (every copy of a DUP chunk), the rest unallocated. Where stripes overlap
// (a corrupt chunk map) the one starting first keeps the shared sectors.
func (fs *FS) Layout() []Region {
	total := uint64(fs.size) / SectorSize
	type span struct {
		start, end uint64
		kind       string
		prio       int
	}
	var spans []span
	for _, o := range SuperblockCopies {
		if o+SuperblockSize <= fs.size {
			spans = append(spans, span{uint64(o) / SectorSize, uint64(o+SuperblockSize) / SectorSize, KindSuperblock, 0})
		}
	}
	for _, c := range fs.chunks {
		for _, s := range c.Stripes {
			if s.DevID != fs.sb.DevID || s.Offset >= uint64(fs.size) {
				continue
			}
			end := min(s.Offset+c.Length, uint64(fs.size))
			if end < s.Offset {
				end = uint64(fs.size)
			}
			spans = append(spans, span{s.Offset / SectorSize, (end + SectorSize - 1) / SectorSize, c.Kind(), 1})
		}
	}
	sort.SliceStable(spans, func(i, j int) bool {
		if spans[i].start != spans[j].start {
			return spans[i].start < spans[j].start
		}
		return spans[i].prio < spans[j].prio
	})
	var out []Region
	add := func(kind string, start, end uint64) {
		if end <= start {
			return
		}
		if n := len(out); n > 0 && out[n-1].Kind == kind && out[n-1].End() == start {
			out[n-1].Sectors += end - start
			return
		}
		out = append(out, Region{Kind: kind, FirstLBA: start, Sectors: end - start})
	}
	// Superblock copies cut through the stripes that hold them.
	var supers [][2]uint64 // sorted: spans are
	for _, sp := range spans {
		if sp.kind == KindSuperblock {
			supers = append(supers, [2]uint64{sp.start, sp.end})
		}
	}
	emit := func(kind string, start, end uint64) {
		for _, s := range supers {
			if s[1] <= start || s[0] >= end {
				continue
			}
			add(kind, start, s[0])
			add(KindSuperblock, max(s[0], start), min(s[1], end))
			start = min(s[1], end)
		}
		add(kind, start, end)
	}
	var cur uint64
	for _, sp := range spans {
		if sp.kind == KindSuperblock {
			continue
		}
		start := max(sp.start, cur)
		end := min(sp.end, total)
		if start >= end {
			continue
		}
		emit(KindUnallocated, cur, start)
		emit(sp.kind, start, end)
		cur = end
	}
	emit(KindUnallocated, cur, total)
	return out
}

// Locate returns the region holding sector lba (KindOutside past the end).
func (fs *FS) Locate(lba uint64) Region {
	l := fs.Layout()
	i := sort.Search(len(l), func(i int) bool { return l[i].End() > lba })
	if i == len(l) {
		total := uint64(fs.size) / SectorSize
		return Region{Kind: KindOutside, FirstLBA: total, Sectors: max(lba+1, total) - total}
	}
	return l[i]
}
