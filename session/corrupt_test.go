package session

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/overlay"
)

func TestParseTarget(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want Target
	}{
		{"superblock.magic", Target{Kind: targetSuper, Field: "magic"}},
		{"superblock.s_inodes_count", Target{Kind: targetSuper, Field: "inodes_count"}},
		{"gd.bg_inode_table", Target{Kind: targetGD, Field: "bg_inode_table"}},
		{"gd.block_bitmap", Target{Kind: targetGD, Field: "bg_block_bitmap"}},
		{"bitmap.block", Target{Kind: targetBitmap, Field: "block"}},
		{"bitmap.inode", Target{Kind: targetBitmap, Field: "inode"}},
		{"inode:d/f:i_size", Target{Kind: targetInode, Path: "d/f", Field: "i_size"}},
		{"inode:/d/f:i_links_count", Target{Kind: targetInode, Path: "d/f", Field: "i_links_count"}},
		{"dirent:d:f:rec_len", Target{Kind: targetDirent, Path: "d", Name: "f", Field: "rec_len"}},
		{"dirent::lost+found:rec_len", Target{Kind: targetDirent, Path: "", Name: "lost+found", Field: "rec_len"}},
		{"data:d/f:0:0", Target{Kind: targetData, Path: "d/f", Offset: 0, Bit: 0}},
		{"data:d/f:4097:7", Target{Kind: targetData, Path: "d/f", Offset: 4097, Bit: 7}},
		{"lba:2:56:0", Target{Kind: targetLBA, LBA: 2, Offset: 56}},
		{"lba:0x10:511:3", Target{Kind: targetLBA, LBA: 16, Offset: 511, Bit: 3}},
	} {
		got, err := ParseTarget(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseTargetErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"superblock.nope", "superblock field"},
		{"gd.nope", "group descriptor field"},
		{"bitmap.free", "want superblock"},
		{"inode:d/f", "want inode:<path>:<field>"},
		{"inode::i_size", "path: required"},
		{"inode:d/../f:i_size", `".."`},
		{"inode:d/f:i_nope", "inode field"},
		{"dirent:d:a/b:rec_len", "dirent name"},
		{"dirent:d:f:size", "dirent field"},
		{"data:d/f:-1:0", "offset"},
		{"data:d/f:0:8", "bit"},
		{"lba:1:512:0", "offset"},
		{"lba:x:0:0", "lba"},
		{"block:1", "unknown target kind"},
		{"", "want superblock"},
	} {
		_, err := ParseTarget(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTarget(%q) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func TestValidateCorrupt(t *testing.T) {
	t.Parallel()
	o := CorruptOptions{}
	ts, setup, err := validateCorrupt(&o)
	if err != nil {
		if strings.Contains(err.Error(), "e2fsck not installed") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if len(ts) != len(Table11Targets) || len(setup) != len(DefaultCorruptSetup) || o.Lanes[0] != "ext2" || o.MemoryMiB != 128 {
		t.Errorf("defaults: %d targets, %d setup ops, %+v", len(ts), len(setup), o)
	}
	o = CorruptOptions{Sweep: true}
	if ts, _, err := validateCorrupt(&o); err != nil || len(ts) != len(SweepTargets) {
		t.Errorf("sweep: %d targets, %v", len(ts), err)
	}
	for _, c := range []struct {
		o     CorruptOptions
		field string
	}{
		{CorruptOptions{Targets: []string{"superblock.magic", "inode:f:bogus"}}, "targets[1]"},
		{CorruptOptions{Targets: []string{"nope"}}, "targets[0]"},
		{CorruptOptions{Lanes: []string{"ext2", "vfat"}}, "lanes[1]"},
		{CorruptOptions{Setup: []string{"frobnicate f"}}, "setup[0]"},
	} {
		_, _, err := validateCorrupt(&c.o)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("validateCorrupt(%+v) = %v, want a FieldError on %s", c.o, err, c.field)
		}
	}
}

// TestResolveTarget resolves targets on a fresh mkfs.ext2 image (the
// lanes' base) and checks them against the on-disk values.
func TestResolveTarget(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("mkfs.ext2"); err != nil {
		t.Skip("mkfs.ext2 not installed (Debian e2fsprogs)")
	}
	spec, err := guest.ParseLaneSpec("ext2")
	if err != nil {
		t.Fatal(err)
	}
	path, err := guest.MakeBase(context.Background(), t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := overlay.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	fs, err := fsimage.Open(dev, dev.Size())
	if err != nil {
		t.Fatal(err)
	}
	byteAt := func(f flip) byte {
		var b [1]byte
		if _, err := dev.ReadAt(b[:], int64(f.LBA)*overlay.SectorSize+int64(f.Offset)); err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	for _, c := range []struct {
		target string
		want   flip
		value  int // the byte's value, -1: don't check
	}{
		{"superblock.magic", flip{LBA: 2, Offset: 56, Region: "superblock", Field: "s_magic"}, 0x53},
		{"lba:2:57:3", flip{LBA: 2, Offset: 57, Bit: 3, Region: "superblock", Field: "raw"}, 0xEF},
		{"gd.bg_inode_table", flip{LBA: 4, Offset: 8, Region: "group-descriptors", Field: "bg_inode_table"}, int(fs.Groups()[0].InodeTable & 0xff)},
		{"inode:lost+found:i_links_count", flip{Region: "inode-table", Field: "inode 11 i_links_count"}, 2},
		{"dirent::lost+found:rec_len", flip{Region: "data", Field: `dirent "lost+found" rec_len`}, -1},
	} {
		tg, err := ParseTarget(c.target)
		if err != nil {
			t.Fatal(err)
		}
		got, err := resolve(tg, fs, dev, dev.Size())
		if err != nil {
			t.Errorf("%s: %v", c.target, err)
			continue
		}
		if c.want.LBA != 0 && (got.LBA != c.want.LBA || got.Offset != c.want.Offset) || got.Bit != c.want.Bit || got.Region != c.want.Region || got.Field != c.want.Field {
			t.Errorf("%s: %+v, want %+v", c.target, got, c.want)
		}
		if v := byteAt(got); c.value >= 0 && int(v) != c.value {
			t.Errorf("%s: byte %#x, want %#x", c.target, v, c.value)
		}
	}
	// A set bit of each bitmap.
	for _, s := range []string{"bitmap.block", "bitmap.inode"} {
		tg, _ := ParseTarget(s)
		got, err := resolve(tg, fs, dev, dev.Size())
		if err != nil || byteAt(got)&(1<<got.Bit) == 0 || !strings.HasSuffix(got.Region, "bitmap") {
			t.Errorf("%s: %+v, %v: want a set bit in a bitmap", s, got, err)
		}
	}
	for _, s := range []string{"inode:nope:i_size", "dirent::nope:rec_len", "data:lost+found:0:0", "lba:999999999:0:0"} {
		tg, _ := ParseTarget(s)
		if got, err := resolve(tg, fs, dev, dev.Size()); err == nil {
			t.Errorf("%s: %+v, want an error", s, got)
		}
	}
}
