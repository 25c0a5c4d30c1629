package belowfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/fsimage/btrfs"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/hostfsck"
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
		{CorruptOptions{Lanes: []string{"ext2", "vfat"}, Targets: []string{"data:d/f:0:0"}}, "targets[0]"},
		{CorruptOptions{Setup: []string{"frobnicate f"}}, "setup[0]"},
		{CorruptOptions{Lanes: []string{"overlay"}, Targets: []string{"inode:d/f:i_size"}}, "targets[0]"},
	} {
		_, _, err := validateCorrupt(&c.o)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, errkind.ErrInvalid) {
			t.Errorf("validateCorrupt(%+v) = %v, want a errkind.FieldError on %s", c.o, err, c.field)
		}
	}
}

// TestValidateCorruptEveryLane: every lane filesystem takes the sweep (its
// unparsed structures n/a at run time) and lba targets.
func TestValidateCorruptEveryLane(t *testing.T) {
	t.Parallel()
	for _, lanes := range [][]string{{"ext2", "vfat"}, {"overlay"}, {"udf", "exfat"}} {
		o := CorruptOptions{Lanes: lanes, Sweep: true, Targets: []string{"lba:2:0:0"}}
		if _, _, err := validateCorrupt(&o); err != nil {
			t.Errorf("%v: %v", lanes, err)
		}
	}
	if _, err := resolveRaw(Target{Kind: targetLBA, LBA: 3, Offset: 7, Bit: 2}, 8<<20); err != nil {
		t.Error(err)
	}
	if _, err := resolveRaw(Target{Kind: targetLBA, LBA: 1 << 20}, 8<<20); err == nil {
		t.Error("lba past the disk resolved")
	}
	if _, err := resolveRaw(Target{Kind: targetData, Path: "d/f"}, 8<<20); err == nil {
		t.Error("data resolved without a parser")
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
	path, err := baseimage.Make(context.Background(), t.TempDir(), spec)
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

func TestTargetAppliesTo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		target, fs string
		want       string // error substring; "" applies
	}{
		{"superblock.magic", "ext2", ""},
		{"bitmap.inode", "ext4", ""},
		{"data:d/f:0:0", "btrfs", ""},
		{"lba:128:64:0", "btrfs", ""},
		{"superblock.magic", "btrfs", ""},
		{"superblock.inodes_count", "btrfs", ""},
		{"gd.bg_inode_table", "btrfs", ""},
		{"inode:d/f:i_size", "btrfs", ""},
		{"dirent:d:f:rec_len", "btrfs", ""},
		{"superblock.first_ino", "btrfs", "superblock field first_ino has no btrfs counterpart"},
		{"gd.bg_used_dirs_count", "btrfs", "group descriptor bg_used_dirs_count has no btrfs counterpart"},
		{"bitmap.block", "btrfs", "bitmap is not a btrfs structure (btrfs keeps no allocation bitmaps"},
		{"inode:d/f:i_size", "vfat", "not a vfat structure"},
		{"data:d/f:0:0", "vfat", "no parser reads vfat images yet"},
		{"lba:2:0:0", "udf", ""},
		{"inode:d/f:i_size", "xfs", ""},
		{"gd.bg_inode_table", "xfs", ""},
		{"data:d/f:0:0", "xfs", ""},
		{"bitmap.inode", "xfs", "not a xfs structure (xfs keeps no allocation bitmaps"},
		{"superblock.first_ino", "xfs", "has no xfs counterpart"},
	} {
		tg, err := ParseTarget(c.target)
		if err != nil {
			t.Fatal(err)
		}
		err = tg.AppliesTo(c.fs)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s on %s: %v, want %q", c.target, c.fs, err, c.want)
		}
	}
}

// TestValidateCorruptBtrfs: btrfs lanes take data and lba targets; an
// ext2/3/4 target given by name is refused naming the lane's filesystem,
// while the sweep's and the default targets are kept (n/a at run time).
func TestValidateCorruptBtrfs(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"btrfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	o := CorruptOptions{Lanes: []string{"ext2", "btrfs"}, Targets: []string{"data:d/f:0:0", "lba:128:64:0"}}
	if ts, _, err := validateCorrupt(&o); err != nil || len(ts) != 2 || ts[0].implicit {
		t.Errorf("data and lba on btrfs: %v, %v", ts, err)
	}
	o = CorruptOptions{Lanes: []string{"ext2", "btrfs"}, Targets: []string{"data:d/f:0:0", "bitmap.block"}}
	_, _, err := validateCorrupt(&o)
	var fe *errkind.FieldError
	if !errors.As(err, &fe) || fe.Field != "targets[1]" || !strings.Contains(err.Error(), "bitmap.block on lane btrfs (btrfs): an ext2/3/4 block group bitmap is not a btrfs structure") {
		t.Errorf("bitmap.block on btrfs: %v", err)
	}
	for _, o := range []CorruptOptions{{Lanes: []string{"btrfs"}, Sweep: true}, {Lanes: []string{"btrfs"}}} {
		ts, _, err := validateCorrupt(&o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		for _, tg := range ts {
			if !tg.implicit {
				t.Errorf("%+v: %s not implicit", o, tg.text)
			}
		}
	}
	// Given by name alongside the sweep: checked.
	o = CorruptOptions{Lanes: []string{"btrfs"}, Sweep: true, Targets: []string{"bitmap.inode"}}
	if _, _, err := validateCorrupt(&o); !errors.As(err, &fe) || fe.Field != "targets[0]" {
		t.Errorf("named ext target with --sweep on btrfs: %v", err)
	}
}

// mkfsBtrfsTree makes a mixed btrfs image holding files (path -> content)
// with mkfs.btrfs --rootdir.
func mkfsBtrfsTree(t *testing.T, files map[string]string) string {
	t.Helper()
	bin, err := exec.LookPath("mkfs.btrfs")
	if err != nil {
		t.Skip("mkfs.btrfs not installed (Debian btrfs-progs)")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-q", "-f", "-K", "--mixed", "--rootdir", root, img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.btrfs: %v\n%s", err, out)
	}
	return img
}

// TestResolveTargetBtrfs resolves targets on a real btrfs image and checks
// the flipped byte is the file's.
func TestResolveTargetBtrfs(t *testing.T) {
	t.Parallel()
	img := mkfsBtrfsTree(t, map[string]string{"d/f": strings.Repeat("A", 4096) + "B", "small": "tiny"})
	dev, err := overlay.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	fs, err := btrfs.Open(dev, dev.Size())
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
		target, region, field string
		bit                   int
		value                 byte
	}{
		{"data:d/f:0:3", btrfs.KindMixed, "data of inode", 3, 'A'},
		{"data:d/f:4096:0", btrfs.KindMixed, "data of inode", 0, 'B'},
		{"data:small:2:7", btrfs.KindMixed, "inline data of inode", 7, 'n'},
		{"lba:128:64:0", btrfs.KindSuperblock, "raw", 0, '_'},
		{"superblock.magic", btrfs.KindSuperblock, "magic as superblock magic", 0, '_'},
		{"inode:d/f:i_size", btrfs.KindMixed, "i_size as inode item ", 0, 0x01},                    // 4097 bytes
		{"dirent:d:f:name_len", btrfs.KindMixed, "name_len as dir item ", 0, 1},                    // "f"
		{"gd.bg_block_bitmap", btrfs.KindMixed, "bg_block_bitmap as block group item at", 0, 0x02}, // the system block group first
	} {
		tg, err := ParseTarget(c.target)
		if err != nil {
			t.Fatal(err)
		}
		got, err := resolveBtrfs(tg, fs, dev.Size())
		if err != nil {
			t.Errorf("%s: %v", c.target, err)
			continue
		}
		if got.Region != c.region || !strings.HasPrefix(got.Field, c.field) || got.Bit != c.bit || byteAt(got) != c.value {
			t.Errorf("%s: %+v (byte %q), want region %s, field %s..., bit %d, byte %q", c.target, got, byteAt(got), c.region, c.field, c.bit, c.value)
		}
	}
	for _, s := range []string{"data:nope:0:0", "data:d/f:4097:0", "lba:65536:0:0", "bitmap.block", "inode:nope:i_mode", "dirent:d:nope:inode"} {
		tg, _ := ParseTarget(s)
		if got, err := resolveBtrfs(tg, fs, dev.Size()); err == nil {
			t.Errorf("%s: %+v, want an error", s, got)
		}
	}
}

// TestFsck runs each host checker on a clean image, one with a flipped
// bit it reports (ext2: the block bitmap; btrfs: a file's data, through
// --check-data-csum) and one without a superblock magic.
func TestFsck(t *testing.T) {
	t.Parallel()
	if _, err := hostfsck.For("vfat"); err == nil || !strings.Contains(err.Error(), "not supported for vfat") {
		t.Errorf("hostfsck.For(vfat) = %v", err)
	}
	for _, c := range []struct {
		fs    string
		image func(t *testing.T) (img []byte, dirty, magic int64)
	}{
		{"ext2", func(t *testing.T) ([]byte, int64, int64) {
			spec, _ := guest.ParseLaneSpec("ext2")
			if _, err := exec.LookPath("mkfs.ext2"); err != nil {
				t.Skip(err)
			}
			base, err := baseimage.Make(context.Background(), t.TempDir(), spec)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(base)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := fsimage.Open(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			return b, int64(fs.Groups()[0].BlockBitmap) * int64(fs.BlockSize()), fsimage.SuperblockOffset + 56
		}},
		{"btrfs", func(t *testing.T) ([]byte, int64, int64) {
			b, err := os.ReadFile(mkfsBtrfsTree(t, map[string]string{"d/f": strings.Repeat("A", 4096)}))
			if err != nil {
				t.Fatal(err)
			}
			fs, err := btrfs.Open(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			loc, err := fs.FileByte("d/f", 0)
			if err != nil {
				t.Fatal(err)
			}
			return b, loc.Phys, btrfs.SuperblockOffset + 0x40
		}},
	} {
		t.Run(c.fs, func(t *testing.T) {
			t.Parallel()
			tool, err := hostfsck.For(c.fs)
			if err != nil {
				t.Fatal(err)
			}
			if err := tool.Installed(); err != nil {
				t.Skip(err)
			}
			b, dirty, magic := c.image(t)
			for _, v := range []struct {
				flip int64
				want hostfsck.Verdict
			}{{-1, hostfsck.Clean}, {dirty, hostfsck.Dirty}, {magic, hostfsck.Broken}} {
				img := filepath.Join(t.TempDir(), "img")
				m := append([]byte(nil), b...)
				if v.flip >= 0 {
					m[v.flip] ^= 1
				}
				if err := os.WriteFile(img, m, 0o644); err != nil {
					t.Fatal(err)
				}
				got, out, err := tool.Run(context.Background(), img)
				if err != nil || got != v.want || bytes.Contains(out, []byte(img)) {
					t.Errorf("%s, flip at %d: verdict %d, %v, want %d\n%s", tool.Name, v.flip, got, err, v.want, out)
				}
			}
		})
	}
}
