package belowfs

import (
	"context"
	"fmt"
	"strings"

	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/fsimage/btrfs"
	"github.com/themisfs/themis/overlay"
)

// RegionUnparsed labels every sector of a lane whose filesystem no parser
// reads: its layout is what its writes show (the profile's Inferred runs).
const RegionUnparsed = "unparsed"

// layout labels a lane's sectors with the regions of its parsed image.
type layout interface {
	// Regions is the image's layout, a partition of its sectors.
	Regions() []LBARange
	// Kind is the region kind of sector lba.
	Kind(lba uint64) string
}

// extLayout is an ext2/3/4 image's (fsimage).
type extLayout struct{ fs *fsimage.FS }

func (l extLayout) Regions() []LBARange {
	var out []LBARange
	for _, r := range l.fs.Layout() {
		out = append(out, LBARange{First: r.FirstLBA, Count: r.Sectors, Region: r.Kind})
	}
	return out
}
func (l extLayout) Kind(lba uint64) string { return l.fs.Locate(lba).Kind }

// btrfsLayout is a btrfs image's (fsimage/btrfs: superblock copies and
// chunks by kind).
type btrfsLayout struct{ fs *btrfs.FS }

func (l btrfsLayout) Regions() []LBARange {
	var out []LBARange
	for _, r := range l.fs.Layout() {
		out = append(out, LBARange{First: r.FirstLBA, Count: r.Sectors, Region: r.Kind})
	}
	return out
}
func (l btrfsLayout) Kind(lba uint64) string { return l.fs.Locate(lba).Kind }

// rawLayout is one unparsed region over the whole disk.
type rawLayout struct{ sectors uint64 }

func (l rawLayout) Regions() []LBARange {
	return []LBARange{{First: 0, Count: l.sectors, Region: RegionUnparsed}}
}
func (l rawLayout) Kind(uint64) string { return RegionUnparsed }

// layoutOf parses lane i's resolved overlay with the parser of its
// filesystem (fsimage for ext2/3/4, with the image for the block owners;
// fsimage/btrfs) or none. Reads through it count as reads: call it outside
// a measured window.
func (b *below) layoutOf(ctx context.Context, i int) (layout, *fsimage.FS, error) {
	fsName := b.specs[i].FS
	if strings.HasPrefix(fsName, "ext") {
		fs, err := b.image(ctx, i)
		if err != nil {
			return nil, nil, err
		}
		return extLayout{fs}, fs, nil
	}
	var lay layout
	err := b.dev(ctx, i, "parse image", func(d *overlay.Device) error {
		if fsName != "btrfs" {
			lay = rawLayout{uint64(d.Size() / overlay.SectorSize)}
			return nil
		}
		fs, err := btrfs.Open(d, d.Size())
		lay = btrfsLayout{fs}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("lane %s: %w", b.lanes[i], err)
	}
	return lay, nil, nil
}
