package belowfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/fsimage/xfs"
	"github.com/themisfs/themis/overlay"
)

// TestResolveTargetXfs resolves every sweep target on a real xfs image
// (mkfs.xfs -p: d/f of 4096 'A's, d/g empty) and checks the bytes flipped:
// the data byte, and each mapped field's least significant byte.
func TestResolveTargetXfs(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		t.Skip("mkfs.xfs not installed (Debian xfsprogs)")
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte(strings.Repeat("A", 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	proto := filepath.Join(dir, "proto")
	body := strings.Join([]string{"/dev/null", "0 0", "d--755 0 0", "d d--755 0 0", "f ---644 0 0 " + f, "g ---644 0 0 /dev/null", "$", "$", ""}, "\n")
	if err := os.WriteFile(proto, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 300<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-q", "-f", "-p", proto, img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v\n%s", err, out)
	}
	dev, err := overlay.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	fs, err := xfs.Open(dev, dev.Size())
	if err != nil {
		t.Fatal(err)
	}
	byteAt := func(fl flip) byte {
		var b [1]byte
		if _, err := dev.ReadAt(b[:], int64(fl.LBA)*overlay.SectorSize+int64(fl.Offset)); err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	for _, c := range []struct {
		target, field string
		value         byte
	}{
		{"data:d/f:0:0", "data of d/f, byte 0", 'A'},
		{"superblock.magic", "magic as superblock magicnum", 'B'}, // "XFSB"'s last byte
		{"superblock.log_block_size", "log_block_size as superblock blocklog", 12},
		{"inode:d/f:i_size", "i_size as inode ", 0x00},            // 4096: 0x1000
		{"inode:d/f:i_mode", "i_mode as inode ", 0xa4},            // 0100644
		{"inode:d/f:i_links_count", "i_links_count as inode ", 1}, // one link
		{"dirent:d:f:name_len", "name_len as short-form entry \"f\" in ", 1},
		{"gd.bg_block_bitmap", "bg_block_bitmap as AGF 0 agf.bno_root", 1}, // the bno btree's root block
		{"gd.bg_inode_table", "bg_inode_table as AGI 0 agi.root", 3},       // the inobt's root block
		{"lba:3:5:6", "raw", 0},
	} {
		tg, err := ParseTarget(c.target)
		if err != nil {
			t.Fatal(err)
		}
		got, err := resolveXfs(tg, fs, dev.Size())
		if err != nil {
			t.Errorf("%s: %v", c.target, err)
			continue
		}
		if !strings.HasPrefix(got.Field, c.field) || (c.target != "lba:3:5:6" && byteAt(got) != c.value) {
			t.Errorf("%s: %+v (byte %#x), want field %q..., byte %#x", c.target, got, byteAt(got), c.field, c.value)
		}
	}
	for _, s := range []string{"bitmap.block", "data:nope:0:0", "inode:d/f:i_block", "dirent:d:nope:inode"} {
		tg, _ := ParseTarget(s)
		if got, err := resolveXfs(tg, fs, dev.Size()); err == nil {
			t.Errorf("%s: %+v, want an error", s, got)
		}
	}
}
