package baseimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/themisfs/themis/fsimage/nilfs2"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/hosttool"
)

// TestMakeBaseReproducible makes each base image in two fresh cache
// directories and requires identical bytes, a clean e2fsck and the asked
// inode size.
func TestMakeBaseReproducible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec      string
		inodeSize int // checked with dumpe2fs; 0 for vfat and btrfs
	}{
		{"ext2", 128},
		{"ext4", 256},
		{"ext2:inode_size=256", 256},
		{"ext4:inode_size=128:size=16", 128},
		{"ext3:block_size=4096", 256},
		{"vfat", 0},
		{"vfat:fat=32:size=64", 0},
		{"btrfs", 0},
		{"btrfs:mixed=0:size=128", 0},
		{"xfs", 0},
		{"xfs:bigtime=0", 0},
		{"exfat", 0},
		{"udf", 0},
		{"f2fs", 0},
		{"minix", 0},
		{"nilfs2", 0},
		{"ext2:seed=1", 128},
		{"ext3:seed=2", 256},
		{"ext4:seed=3", 256},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			spec, err := guest.ParseLaneSpec(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := hosttool.Look("mkfs." + spec.FS); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatal(err)
				}
				t.Skipf("skipping: %v", err)
			}
			ctx := context.Background()
			var sums [2][32]byte
			var paths [2]string
			for i := range sums {
				p, err := Make(ctx, t.TempDir(), spec)
				if err != nil {
					t.Fatal(err)
				}
				paths[i] = p
				b := readFile(t, p)
				if got, want := len(b), spec.SizeMiB<<20; got != want {
					t.Errorf("%s: %d bytes, want %d", p, got, want)
				}
				sums[i] = sha256.Sum256(b)
			}
			if sums[0] != sums[1] {
				t.Fatalf("two fresh builds differ: %x vs %x", sums[0], sums[1])
			}
			if filepath.Base(paths[0]) != filepath.Base(paths[1]) {
				t.Errorf("cache names differ: %s vs %s", paths[0], paths[1])
			}
			st, err := os.Stat(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o444 {
				t.Errorf("base image mode %v, want read-only", st.Mode())
			}
			switch spec.FS {
			case "vfat":
				checkVfat(t, paths[0])
				return
			case "btrfs":
				checkBtrfs(t, paths[0], spec)
				return
			case "nilfs2":
				checkNilfs2(t, paths[0])
				return
			case "xfs", "exfat", "udf", "f2fs", "minix":
				checkPinned(t, paths[0], spec)
				return
			}
			checkExt(t, paths[0], spec, tt.inodeSize)
			checkSeed(t, paths[0], spec)
		})
	}
}

// checkSeed lists the image's tree with debugfs and compares it with the
// spec's guest.SeedTree (nothing but lost+found without a seed), every inode
// owned by root with the pinned time.
func checkSeed(t *testing.T, img string, spec guest.LaneSpec) {
	t.Helper()
	bin, err := hosttool.Look("debugfs")
	if err != nil {
		t.Fatal(err)
	}
	tree := guest.SeedTree(spec.Seed())
	if err := checkSeeded(context.Background(), bin, img, tree); err != nil {
		t.Error(err)
	}
	out, err := exec.Command(bin, "-R", "ls -p /", img).Output()
	if err != nil {
		t.Fatalf("debugfs ls: %v", err)
	}
	top := 3 // ., .., lost+found
	for _, e := range tree {
		if !strings.Contains(e.Path, "/") {
			top++
		}
	}
	if got := len(strings.Fields(string(out))); got != top {
		t.Errorf("root of %s lists\n%s\nwant %d entries", spec, out, top)
	}
	for _, e := range tree {
		times, err := guest.ExtInodeTimes(context.Background(), img, "/"+e.Path)
		if err != nil {
			t.Fatal(err)
		}
		if times.Atime != FakeTime || times.Mtime != FakeTime || times.Ctime != FakeTime {
			t.Errorf("%s in %s: times %+v, want all %d", e.Path, spec, times, FakeTime)
		}
		if e.Dir {
			continue
		}
		data, err := exec.Command(bin, "-R", "cat /"+e.Path, img).Output()
		if err != nil {
			t.Fatalf("debugfs cat %s: %v", e.Path, err)
		}
		if !bytes.Equal(data, e.Data) {
			t.Errorf("%s in %s: %d bytes, not the seed's %d", e.Path, spec, len(data), len(e.Data))
		}
	}
}

func checkExt(t *testing.T, img string, spec guest.LaneSpec, inodeSize int) {
	t.Helper()
	fsck, err := hosttool.Look("e2fsck")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(fsck, "-fn", img).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
	dump, err := hosttool.Look("dumpe2fs")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(dump, "-h", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs -h: %v\n%s", err, out)
	}
	for _, want := range []string{
		fmt.Sprintf("Inode size:\\s+%d\n", inodeSize),
		"Filesystem UUID:\\s+" + UUID + "\n",
		"Directory Hash Seed:\\s+" + UUID + "\n",
		"Filesystem created:\\s+Sun Sep  9 01:46:40 2001\n",
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("dumpe2fs -h %s: no match for %q in\n%s", spec, want, out)
		}
	}
	hasJournal := bytes.Contains(out, []byte("has_journal"))
	if wantJournal := spec.FS != "ext2"; hasJournal != wantJournal {
		t.Errorf("%s: has_journal = %v, want %v", spec, hasJournal, wantJournal)
	}
	if bs, ok := spec.Options["block_size"]; ok && !regexp.MustCompile("Block size:\\s+"+bs+"\n").Match(out) {
		t.Errorf("%s: block size not %s", spec, bs)
	}
}

// checkBtrfs checks a btrfs base image with btrfs check and reads its
// pinned identity back with dump-super.
func checkBtrfs(t *testing.T, img string, spec guest.LaneSpec) {
	t.Helper()
	bin, err := hosttool.Look("btrfs")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "--readonly", img).CombinedOutput(); err != nil {
		t.Errorf("btrfs check --readonly %s: %v\n%s", img, err, out)
	}
	out, err := exec.Command(bin, "inspect-internal", "dump-super", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dump-super: %v\n%s", err, out)
	}
	want := []string{"fsid\\s+" + UUID + "\n", "dev_item.uuid\\s+" + BtrfsDevUUID + "\n", "csum_type\\s+0 \\(crc32c\\)"}
	if mixed := bytes.Contains(out, []byte("MIXED_GROUPS")); mixed != (spec.Options["mixed"] == "1") {
		t.Errorf("%s: MIXED_GROUPS = %v", spec, mixed)
	}
	for _, w := range want {
		if !regexp.MustCompile(w).Match(out) {
			t.Errorf("dump-super %s: no match for %q in\n%s", spec, w, out)
		}
	}
}

func checkVfat(t *testing.T, img string) {
	t.Helper()
	// The volume id sits in the extended BIOS parameter block: at 0x27 for
	// FAT12/16, at 0x43 for FAT32 (whose 16-bit sectors-per-FAT is 0).
	b := readFile(t, img)
	off := 0x27
	if binary.LittleEndian.Uint16(b[0x16:]) == 0 {
		off = 0x43
	}
	if got := fmt.Sprintf("%08x", binary.LittleEndian.Uint32(b[off:])); got != VolumeID {
		t.Errorf("volume id %s, want %s", got, VolumeID)
	}
	fsck, err := hosttool.Look("fsck.vfat")
	if err != nil {
		t.Skipf("skipping fsck: %v", err)
	}
	if out, err := exec.Command(fsck, "-n", img).CombinedOutput(); err != nil {
		t.Errorf("fsck.vfat -n %s: %v\n%s", img, err, out)
	}
}

func TestMakeBaseCached(t *testing.T) {
	t.Parallel()
	spec, err := guest.ParseLaneSpec("ext2:name=first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hosttool.Look("mkfs.ext2"); err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	p1, err := Make(context.Background(), dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(p1)
	if err != nil {
		t.Fatal(err)
	}
	// The name does not change the image; the inode size does.
	spec2, err := guest.ParseLaneSpec("ext2:name=second")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Make(context.Background(), dir, spec2)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(p2)
	if err != nil {
		t.Fatal(err)
	}
	// A rebuild renames a new file into place; a hit only marks the image
	// used (its modification time).
	if p1 != p2 || !os.SameFile(st1, st2) {
		t.Errorf("second MakeBase rebuilt: %s vs %s", p1, p2)
	}
	spec3, err := guest.ParseLaneSpec("ext2:inode_size=256")
	if err != nil {
		t.Fatal(err)
	}
	p3, err := Make(context.Background(), dir, spec3)
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p1 {
		t.Error("different inode size, same cache path")
	}
	// The seed is part of the key; seed=0 is the empty image.
	for _, c := range []struct {
		spec string
		same bool
	}{{"ext2:seed=0", true}, {"ext2:seed=1", false}, {"ext2:seed=2", false}} {
		sp, err := guest.ParseLaneSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Make(context.Background(), dir, sp)
		if err != nil {
			t.Fatal(err)
		}
		if (p == p1) != c.same {
			t.Errorf("%s: cache path %s, empty ext2's %s: want same %v", c.spec, p, p1, c.same)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "bases"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestMakeBaseErrors(t *testing.T) {
	t.Parallel()
	if _, err := Make(context.Background(), t.TempDir(), guest.LaneSpec{FS: "ntfs", SizeMiB: 300}); err == nil || !strings.Contains(err.Error(), `unknown filesystem "ntfs"`) {
		t.Errorf("ntfs: err = %v", err)
	}
	if _, err := Make(context.Background(), t.TempDir(), guest.LaneSpec{FS: "ext2", InodeSize: 128}); err == nil || !strings.Contains(err.Error(), "size 0 MiB") {
		t.Errorf("size 0: err = %v", err)
	}
	// mkfs's own complaint comes back: a journal does not fit in 1 MiB... or
	// an inode size mke2fs rejects for the block size it chose.
	spec := guest.LaneSpec{FS: "ext4", InodeSize: 2048, SizeMiB: 2}
	if _, err := Make(context.Background(), t.TempDir(), spec); err == nil || !strings.Contains(err.Error(), "mkfs.ext4") {
		t.Errorf("bad mkfs args: err = %v", err)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkPinned reads back, with the filesystem's own tools, what the base
// image pins: the xfs UUID, bigtime flag and root inode time; the exfat
// volume serial; the udf UUID and recording time.
func checkPinned(t *testing.T, img string, spec guest.LaneSpec) {
	t.Helper()
	type probe struct {
		tool string
		args []string
		want []string
	}
	var probes []probe
	switch spec.FS {
	case "xfs":
		probes = []probe{
			{"xfs_db", []string{"-r", "-c", "sb 0", "-c", "print uuid", img}, []string{"uuid = " + UUID}},
			{"xfs_db", []string{"-r", "-c", "version", img}, nil},
			{"xfs_db", []string{"-r", "-c", "inode 128", "-c", "print core.mtime.sec v3.crtime.sec", img},
				[]string{"core.mtime.sec = Sun Sep  9 01:46:40 2001", "v3.crtime.sec = Sun Sep  9 01:46:40 2001"}},
			{"xfs_repair", []string{"-n", img}, nil},
		}
		if spec.Options["bigtime"] == "1" {
			probes[1].want = []string{"BIGTIME"}
		}
	case "exfat":
		probes = []probe{{"tune.exfat", []string{"-i", img}, []string{"0x" + VolumeID}}, {"fsck.exfat", []string{"-n", img}, []string{"clean"}}}
	case "udf":
		probes = []probe{{"udfinfo", []string{img}, []string{"uuid=" + UDFUUID, "blocksize=512"}}}
	case "f2fs":
		probes = []probe{{"fsck.f2fs", []string{"--dry-run", img}, nil}}
	case "minix":
		probes = []probe{{"fsck.minix", []string{"-f", img}, nil}}
	}
	for _, p := range probes {
		bin, err := hosttool.Look(p.tool)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, p.args...).CombinedOutput()
		if err != nil && p.tool != "tune.exfat" { // tune.exfat -i exits 1 after printing
			t.Fatalf("%s %v: %v\n%s", p.tool, p.args, err, out)
		}
		for _, w := range p.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s %v: no %q in:\n%s", p.tool, p.args, w, out)
			}
		}
	}
}

// checkNilfs2 reads both superblocks of a nilfs2 base image (nilfs-tune
// opens only a device): they carry the pinned UUID and valid checksums.
func checkNilfs2(t *testing.T, img string) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	supers, err := nilfs2.Supers(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseUUID(UUID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range supers {
		if s.UUID != want {
			t.Errorf("superblock at %d: UUID %x, want %s", s.Offset, s.UUID, UUID)
		}
	}
}
