package belowfs

import (
	"path"
	"slices"
	"sort"

	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/overlay"
)

// maxOwnerInodes bounds the image walk of blockOwners.
const maxOwnerInodes = 1 << 16

// ownedRun is a run of sectors [first, first+count) holding blocks of the
// file or directory at path.
type ownedRun struct {
	first, count uint64
	path         string
}

// owners maps sectors of an image's data region to the file or directory
// whose blocks they are, as the image said when it was parsed.
type owners []ownedRun // sorted by first, not overlapping

// blockOwners walks fs from the root, breadth-first, and returns which
// directory or regular file each data block and indirect (or extent tree)
// block belongs to, by "/"-rooted path ("/" is the root directory; the
// first name of a hard-linked file). Labels are a help, never an error: a
// structure fsimage cannot read is skipped, and the walk stops after
// maxOwnerInodes inodes.
func blockOwners(fs *fsimage.FS) owners {
	spb := uint64(fs.BlockSize() / overlay.SectorSize)
	var out owners
	seen := map[uint32]bool{}
	type item struct {
		ino  uint32
		path string
	}
	queue := []item{{fsimage.RootIno, "/"}}
	for len(queue) > 0 && len(seen) < maxOwnerInodes {
		it := queue[0]
		queue = queue[1:]
		if seen[it.ino] {
			continue
		}
		seen[it.ino] = true
		in, err := fs.Inode(it.ino)
		if err != nil || !(in.IsDir() || in.IsRegular()) {
			continue
		}
		if ext, err := fs.Extents(it.ino); err == nil {
			for _, e := range ext {
				out = append(out, ownedRun{first: e.Physical * spb, count: uint64(e.Len) * spb, path: it.path})
			}
		}
		if meta, err := fs.MetaBlocks(it.ino); err == nil {
			for _, b := range meta {
				out = append(out, ownedRun{first: b * spb, count: spb, path: it.path})
			}
		}
		if !in.IsDir() {
			continue
		}
		ents, err := fs.ReadDir(it.ino)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.Inode == 0 || e.Name == "." || e.Name == ".." {
				continue
			}
			queue = append(queue, item{e.Inode, path.Join(it.path, e.Name)})
		}
	}
	slices.SortFunc(out, func(a, b ownedRun) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	// A damaged image may claim a block twice: keep the first claim.
	kept := out[:0]
	for _, r := range out {
		if n := len(kept); n > 0 && r.first < kept[n-1].first+kept[n-1].count {
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// of returns the path owning sector lba, "" when none does.
func (o owners) of(lba uint64) string {
	i := sort.Search(len(o), func(i int) bool { return o[i].first+o[i].count > lba })
	if i < len(o) && o[i].first <= lba {
		return o[i].path
	}
	return ""
}
