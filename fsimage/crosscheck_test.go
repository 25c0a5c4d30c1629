package fsimage

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// dumpe2fsHeader parses `dumpe2fs -h` into key → value.
func dumpe2fsHeader(t *testing.T, img string) map[string]string {
	t.Helper()
	out, err := run(nil, "dumpe2fs", "-h", img)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

func TestSuperblockMatchesDumpe2fs(t *testing.T) {
	for _, im := range images(t) {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fs := openImage(t, im)
			sb := fs.Superblock()
			h := dumpe2fsHeader(t, im.path)
			uuid := fmt.Sprintf("%x-%x-%x-%x-%x", sb.UUID[0:4], sb.UUID[4:6], sb.UUID[6:8], sb.UUID[8:10], sb.UUID[10:16])
			seed := fmt.Sprintf("%x-%x-%x-%x-%x", sb.HashSeed[0:4], sb.HashSeed[4:6], sb.HashSeed[6:8], sb.HashSeed[8:10], sb.HashSeed[10:16])
			for _, c := range []struct{ key, got string }{
				{"Inode count", fmt.Sprint(sb.InodesCount)},
				{"Block count", fmt.Sprint(sb.BlocksCount)},
				{"Free blocks", fmt.Sprint(sb.FreeBlocksCount)},
				{"Free inodes", fmt.Sprint(sb.FreeInodesCount)},
				{"First block", fmt.Sprint(sb.FirstDataBlock)},
				{"Block size", fmt.Sprint(sb.BlockSize)},
				{"Inode size", fmt.Sprint(sb.InodeSize)},
				{"Blocks per group", fmt.Sprint(sb.BlocksPerGroup)},
				{"Inodes per group", fmt.Sprint(sb.InodesPerGroup)},
				{"Filesystem UUID", uuid},
				{"Directory Hash Seed", seed},
				{"Filesystem magic number", fmt.Sprintf("0x%04X", sb.Magic)},
				{"First inode", fmt.Sprint(sb.FirstIno)},
				{"Reserved GDT blocks", fmt.Sprint(sb.ReservedGdtBlocks)},
			} {
				want, ok := h[c.key]
				if !ok && sb.RevLevel == 0 {
					continue // dumpe2fs omits dynamic-revision fields for rev 0
				}
				if c.got != want {
					t.Errorf("%s: got %q, dumpe2fs says %q", c.key, c.got, want)
				}
			}
			if sb.Has64Bit() {
				if got, want := fmt.Sprint(fs.DescSize()), h["Group descriptor size"]; got != want {
					t.Errorf("desc size: got %s, dumpe2fs %s", got, want)
				}
			}
			if sb.HasMetadataCsum() {
				if got, want := fmt.Sprintf("0x%08x", sb.Checksum), h["Checksum"]; got != want {
					t.Errorf("checksum: got %s, dumpe2fs %s", got, want)
				}
			}
			feats := map[string]bool{}
			for _, f := range strings.Fields(h["Filesystem features"]) {
				feats[f] = true
			}
			for _, c := range []struct {
				name string
				has  bool
			}{
				{"has_journal", sb.FeatureCompat&CompatHasJournal != 0},
				{"ext_attr", sb.FeatureCompat&CompatExtAttr != 0},
				{"resize_inode", sb.FeatureCompat&CompatResizeInode != 0},
				{"dir_index", sb.FeatureCompat&CompatDirIndex != 0},
				{"filetype", sb.FeatureIncompat&IncompatFiletype != 0},
				{"extent", sb.FeatureIncompat&IncompatExtents != 0},
				{"64bit", sb.Has64Bit()},
				{"flex_bg", sb.FeatureIncompat&IncompatFlexBG != 0},
				{"sparse_super", sb.FeatureRoCompat&RoCompatSparseSuper != 0},
				{"large_file", sb.FeatureRoCompat&RoCompatLargeFile != 0},
				{"metadata_csum", sb.HasMetadataCsum()},
			} {
				if c.has != feats[c.name] {
					t.Errorf("feature %s: parsed %v, dumpe2fs %v", c.name, c.has, feats[c.name])
				}
			}
		})
	}
}

// statRE picks fields out of debugfs stat output.
var (
	statMode  = regexp.MustCompile(`Mode:\s+(\d+)`)
	statSize  = regexp.MustCompile(`Size: (\d+)`)
	statLinks = regexp.MustCompile(`Links: (\d+)`)
	statGen   = regexp.MustCompile(`Generation: (\d+)`)
	statFlags = regexp.MustCompile(`Flags: (0x[0-9a-f]+)`)
	statCsum  = regexp.MustCompile(`Inode checksum: (0x[0-9a-f]+)`)
	statTime  = regexp.MustCompile(`(?m)^\s*(a|c|m|cr)time: 0x([0-9a-f]+)(?::([0-9a-f]+))?`)
	imapRE    = regexp.MustCompile(`located at block (\d+), offset (0x[0-9a-f]+)`)
)

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return v
}

func TestInodeMatchesDebugfs(t *testing.T) {
	for _, im := range images(t) {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fs := openImage(t, im)
			used := []uint32{2, 7, 11, 12, 13, 14, 15, 16}
			for _, ino := range used {
				in, err := fs.Inode(ino)
				if err != nil {
					t.Fatalf("Inode(%d): %v", ino, err)
				}
				st := debugfsR(t, im.path, fmt.Sprintf("stat <%d>", ino))
				if m := statMode.FindStringSubmatch(st); m == nil || atoi(t, "0"+m[1]) != uint64(in.Mode&0o7777) {
					t.Errorf("inode %d mode %#o, debugfs %v", ino, in.Mode, m)
				}
				if m := statSize.FindStringSubmatch(st); m == nil || atoi(t, m[1]) != in.Size {
					t.Errorf("inode %d size %d, debugfs %v", ino, in.Size, m)
				}
				if m := statLinks.FindStringSubmatch(st); m == nil || atoi(t, m[1]) != uint64(in.Links) {
					t.Errorf("inode %d links %d, debugfs %v", ino, in.Links, m)
				}
				if m := statGen.FindStringSubmatch(st); m == nil || atoi(t, m[1]) != uint64(in.Generation) {
					t.Errorf("inode %d generation %d, debugfs %v", ino, in.Generation, m)
				}
				if m := statFlags.FindStringSubmatch(st); m == nil || atoi(t, m[1]) != uint64(in.Flags) {
					t.Errorf("inode %d flags %#x, debugfs %v", ino, in.Flags, m)
				}
				if m := statCsum.FindStringSubmatch(st); m != nil && atoi(t, m[1]) != uint64(in.Checksum) {
					t.Errorf("inode %d checksum %#x, debugfs %v", ino, in.Checksum, m)
				}
				times := map[string]Timestamp{"a": in.Atime, "c": in.Ctime, "m": in.Mtime, "cr": in.Crtime}
				seen := 0
				for _, m := range statTime.FindAllStringSubmatch(st, -1) {
					seen++
					ts := times[m[1]]
					if atoi(t, "0x"+m[2]) != uint64(ts.Raw32) {
						t.Errorf("inode %d %stime raw %#x, debugfs %s", ino, m[1], ts.Raw32, m[0])
					}
					if (m[3] != "") != ts.HasExtra || (m[3] != "" && atoi(t, "0x"+m[3]) != uint64(ts.Extra)) {
						t.Errorf("inode %d %stime extra %#x (has %v), debugfs %s", ino, m[1], ts.Extra, ts.HasExtra, m[0])
					}
				}
				if seen < 3 {
					t.Errorf("inode %d: found %d times in debugfs stat", ino, seen)
				}
				lba, off, err := fs.InodeLocation(ino)
				if err != nil {
					t.Fatal(err)
				}
				m := imapRE.FindStringSubmatch(debugfsR(t, im.path, fmt.Sprintf("imap <%d>", ino)))
				if m == nil {
					t.Fatalf("imap <%d>: no location", ino)
				}
				want := atoi(t, m[1])*uint64(fs.BlockSize()) + atoi(t, m[2])
				if got := lba*SectorSize + uint64(off); got != want || in.LBA != lba || in.Offset != off {
					t.Errorf("inode %d at byte %d (Inode says %d+%d), debugfs %d", ino, got, in.LBA, in.Offset, want)
				}
				if r := fs.Locate(lba); r.Kind != KindInodeTable {
					t.Errorf("inode %d: Locate(%d) = %+v, want inode-table", ino, lba, r)
				}
			}
			if _, err := fs.Inode(0); err == nil {
				t.Error("Inode(0) succeeded")
			}
			if _, err := fs.Inode(fs.Superblock().InodesCount + 1); err == nil {
				t.Error("Inode(count+1) succeeded")
			}
		})
	}
}

func TestBlocksMatchDebugfs(t *testing.T) {
	for _, im := range images(t) {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fs := openImage(t, im)
			for p := range im.files {
				ino, err := fs.Lookup(p)
				if err != nil {
					t.Fatalf("Lookup(%q): %v", p, err)
				}
				blocks, err := fs.Blocks(ino)
				if err != nil {
					t.Fatalf("Blocks(%d): %v", ino, err)
				}
				meta, err := fs.MetaBlocks(ino)
				if err != nil {
					t.Fatal(err)
				}
				// debugfs lists data and mapping blocks together.
				var got []string
				for _, b := range append(blocks, meta...) {
					if b != 0 {
						got = append(got, fmt.Sprint(b))
					}
				}
				want := strings.Fields(debugfsR(t, im.path, fmt.Sprintf("blocks <%d>", ino)))
				sort.Strings(got)
				sort.Strings(want)
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("%s: Blocks = %v,\ndebugfs blocks = %v", p, got, want)
				}
				for _, b := range blocks {
					if r := fs.Locate(b * uint64(fs.BlockSize()) / SectorSize); r.Kind != KindData {
						t.Errorf("%s: data block %d in %+v", p, b, r)
					}
				}
			}
		})
	}
}

func TestReadFileContent(t *testing.T) {
	for _, im := range images(t) {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fs := openImage(t, im)
			for p, want := range im.files {
				ino, err := fs.Lookup(p)
				if err != nil {
					t.Fatalf("Lookup(%q): %v", p, err)
				}
				got, err := fs.ReadFile(ino, 1<<20)
				if err != nil {
					t.Fatalf("ReadFile(%s): %v", p, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: content differs (%d bytes, want %d)", p, len(got), len(want))
				}
				if _, err := fs.ReadFile(ino, int64(len(want))-1); err == nil {
					t.Errorf("%s: ReadFile below its size succeeded", p)
				}
			}
			ino, err := fs.Lookup("/s")
			if err != nil {
				t.Fatal(err)
			}
			if got, err := fs.ReadFile(ino, 100); err != nil || string(got) != "/d/f" {
				t.Errorf("symlink: %q, %v", got, err)
			}
			// The extent-based images must have needed an extent tree
			// deeper than the inode (fragmented big2), and ext2 an
			// indirect block.
			big, _ := fs.Lookup("/big")
			meta, err := fs.MetaBlocks(big)
			if err != nil {
				t.Fatal(err)
			}
			if fs.Superblock().FeatureIncompat&IncompatExtents == 0 && len(meta) < 3 {
				t.Errorf("ext2 /big: %d indirect blocks, want 3 (IND, DIND, IND)", len(meta))
			}
			if im.frag {
				b2, _ := fs.Lookup("/d/e/big2")
				ext, _ := fs.Extents(b2)
				meta, _ := fs.MetaBlocks(b2)
				if len(ext) < 5 || len(meta) == 0 {
					t.Errorf("big2: %d extents, %d tree blocks: want a depth>0 tree", len(ext), len(meta))
				}
			}
		})
	}
}

func TestLookupErrors(t *testing.T) {
	im := images(t)[0]
	fs := openImage(t, im)
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"", true},
		{"//d///f", true},
		{"/d/./f", true},
		{"/d/../d/f", true},
		{"/missing", false},
		{"/d/f/x", false},                     // f is not a directory
		{"/s/x", false},                       // symlinks are not followed
		{strings.Repeat("/d/..", 200), false}, // too deep
	} {
		_, err := fs.Lookup(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("Lookup(%.40q) err = %v, want ok=%v", tc.path, err, tc.ok)
		}
	}
}

var lsRE = regexp.MustCompile(`^\s*(\d+)\s+(\d+)\s+\((\d+)\)\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+(.*)$`)

func TestReadDirMatchesDebugfs(t *testing.T) {
	for _, im := range images(t) {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fs := openImage(t, im)
			for _, dir := range []string{"/", "/d", "/d/e", "/lost+found"} {
				ino, err := fs.Lookup(dir)
				if err != nil {
					t.Fatal(err)
				}
				ents, err := fs.ReadDir(ino)
				if err != nil {
					t.Fatalf("ReadDir(%s): %v", dir, err)
				}
				var got, want []string
				for _, d := range ents {
					in, err := fs.Inode(d.Inode)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, fmt.Sprintf("%d %o (%d) %d %s", d.Inode, in.Mode, d.FileType, in.Size, d.Name))
					if r := fs.Locate(d.Block * uint64(fs.BlockSize()) / SectorSize); r.Kind != KindData {
						t.Errorf("%s/%s: dirent block %d in %+v", dir, d.Name, d.Block, r)
					}
				}
				for _, line := range strings.Split(debugfsR(t, im.path, "ls -l "+dir), "\n") {
					if m := lsRE.FindStringSubmatch(line); m != nil {
						want = append(want, fmt.Sprintf("%s %s (%s) %s %s", m[1], m[2], m[3], m[6], strings.TrimSpace(m[7])))
					}
				}
				sort.Strings(got)
				sort.Strings(want)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("ReadDir(%s):\n%s\ndebugfs ls -l:\n%s", dir, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}

var (
	grpRE  = regexp.MustCompile(`^Group (\d+): \(Blocks (\d+)-(\d+)\)`)
	sbRE   = regexp.MustCompile(`(Primary|Backup) superblock at (\d+), Group descriptors at (\d+)-(\d+)`)
	rgdtRE = regexp.MustCompile(`Reserved GDT blocks at (\d+)-(\d+)`)
	bbRE   = regexp.MustCompile(`Block bitmap at (\d+)`)
	ibRE   = regexp.MustCompile(`Inode bitmap at (\d+)`)
	itRE   = regexp.MustCompile(`Inode table at (\d+)-(\d+)`)
)

func TestLayoutMatchesDumpe2fs(t *testing.T) {
	for _, im := range images(t) {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fs := openImage(t, im)
			out, err := run(nil, "dumpe2fs", im.path)
			if err != nil {
				t.Fatal(err)
			}
			spb := uint64(fs.BlockSize() / SectorSize)
			groups := fs.Groups()
			g := -1
			// expect checks that blocks [a, b] are all of kind with group g.
			expect := func(kind string, grp int, a, b uint64) {
				t.Helper()
				for blk := a; blk <= b; blk++ {
					for s := uint64(0); s < spb; s++ {
						lba := blk*spb + s
						r := fs.Locate(lba)
						want := kind
						if kind == KindSuperblock {
							off := lba*SectorSize - blk*uint64(fs.BlockSize())
							if blk == 0 {
								off -= 1024 // block 0 holds the boot area first
								if lba < 2 {
									want = KindBoot
								}
							}
							if want != KindBoot && off >= 1024 {
								want = KindPadding
							}
						}
						if r.Kind != want || (want != KindBoot && r.Group != grp) {
							t.Fatalf("block %d sector %d: %+v, dumpe2fs says %s of group %d", blk, lba, r, want, grp)
						}
					}
				}
			}
			ngroups := 0
			for _, line := range strings.Split(out, "\n") {
				if m := grpRE.FindStringSubmatch(line); m != nil {
					g = int(atoi(t, m[1]))
					ngroups++
					continue
				}
				if g < 0 {
					continue
				}
				if m := sbRE.FindStringSubmatch(line); m != nil {
					expect(KindSuperblock, g, atoi(t, m[2]), atoi(t, m[2]))
					expect(KindGroupDescriptors, g, atoi(t, m[3]), atoi(t, m[4]))
				}
				if m := rgdtRE.FindStringSubmatch(line); m != nil {
					expect(KindReservedGDT, g, atoi(t, m[1]), atoi(t, m[2]))
				}
				if m := bbRE.FindStringSubmatch(line); m != nil {
					if groups[g].BlockBitmap != atoi(t, m[1]) {
						t.Errorf("group %d block bitmap %d, dumpe2fs %s", g, groups[g].BlockBitmap, m[1])
					}
					expect(KindBlockBitmap, g, atoi(t, m[1]), atoi(t, m[1]))
				}
				if m := ibRE.FindStringSubmatch(line); m != nil {
					if groups[g].InodeBitmap != atoi(t, m[1]) {
						t.Errorf("group %d inode bitmap %d, dumpe2fs %s", g, groups[g].InodeBitmap, m[1])
					}
					expect(KindInodeBitmap, g, atoi(t, m[1]), atoi(t, m[1]))
				}
				if m := itRE.FindStringSubmatch(line); m != nil {
					if groups[g].InodeTable != atoi(t, m[1]) {
						t.Errorf("group %d inode table %d, dumpe2fs %s", g, groups[g].InodeTable, m[1])
					}
					expect(KindInodeTable, g, atoi(t, m[1]), atoi(t, m[2]))
				}
			}
			if ngroups != len(groups) || ngroups < 2 {
				t.Errorf("%d groups parsed, dumpe2fs lists %d (want >= 2 for backups)", len(groups), ngroups)
			}
			// The layout partitions the image.
			l := fs.Layout()
			var next uint64
			for _, r := range l {
				if r.FirstLBA != next || r.Sectors == 0 {
					t.Fatalf("layout gap or overlap at %+v (want start %d)", r, next)
				}
				next = r.End()
			}
			if next*SectorSize != uint64(fs.Size()) {
				t.Errorf("layout ends at sector %d, image has %d bytes", next, fs.Size())
			}
			if r := fs.Locate(next); r.Kind != KindOutside {
				t.Errorf("Locate(end) = %+v", r)
			}
			if fs.Superblock().FeatureCompat&CompatHasJournal != 0 {
				found := false
				for _, r := range l {
					found = found || r.Kind == KindJournal
				}
				if !found {
					t.Error("no journal region")
				}
			}
		})
	}
}
