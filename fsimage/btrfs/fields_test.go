package btrfs

import (
	"bytes"
	"errors"
	iofs "io/fs"
	"path"
	"strings"
	"testing"
)

// TestFields locates metadata fields on real images and reads them back
// from the image bytes: the superblock's magic, inode items' size, mode
// and nlink, directory items' name length and location, a block group
// item's flags, and the header of the leaf holding an inode item.
func TestFields(t *testing.T) {
	t.Parallel()
	tr := testTree()
	for _, tc := range []struct {
		name    string
		sizeMiB int
		args    []string
	}{{"mixed", 32, []string{"--mixed"}}, {"dup-metadata", 128, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs, img := openImage(t, mkfsTree(t, tr, tc.sizeMiB, tc.args...))
			read := func(f Field) uint64 {
				t.Helper()
				if f.Phys < 0 || f.Phys+int64(f.Size) > int64(len(img)) {
					t.Fatalf("field %+v outside the image", f)
				}
				var v uint64
				for i := min(f.Size, 8) - 1; i >= 0; i-- {
					v = v<<8 | uint64(img[f.Phys+int64(i)])
				}
				return v
			}
			if f, err := fs.SuperField("magic"); err != nil || !bytes.Equal(img[f.Phys:f.Phys+8], []byte("_BHRfS_M")) {
				t.Errorf("SuperField(magic) = %+v, %v", f, err)
			}
			if f, err := fs.SuperField("sectorsize"); err != nil || read(f) != 4096 {
				t.Errorf("SuperField(sectorsize) = %+v, %v", f, err)
			}
			for _, p := range []string{"d/f", "small", "big", "d"} {
				ino, err := fs.Lookup(p)
				if err != nil {
					t.Fatal(err)
				}
				in, err := fs.Inode(ino)
				if err != nil {
					t.Fatal(err)
				}
				for field, want := range map[string]uint64{"size": in.Size, "mode": uint64(in.Mode), "nlink": uint64(in.Nlink)} {
					f, err := fs.InodeField(p, field)
					if err != nil || read(f) != want || !strings.Contains(f.Where, "inode item") {
						t.Errorf("InodeField(%s, %s) = %+v (%d), %v; want %d", p, field, f, read(f), err, want)
					}
				}
				dir, name := path.Split(p)
				if f, err := fs.DirItemField(dir, name, "name_len"); err != nil || read(f) != uint64(len(name)) {
					t.Errorf("DirItemField(%q, %q, name_len) = %+v, %v", dir, name, f, err)
				}
				if f, err := fs.DirItemField(dir, name, "location"); err != nil || read(f) != ino {
					t.Errorf("DirItemField(%q, %q, location) = %+v, %v; want %d", dir, name, f, err, ino)
				}
				h, err := fs.HeaderField(p, "fsid")
				fsid := fs.Superblock().FSID
				if err != nil || !bytes.Equal(img[h.Phys:h.Phys+16], fsid[:]) {
					t.Errorf("HeaderField(%s, fsid) = %+v, %v: not the filesystem's fsid", p, h, err)
				}
				if l, err := fs.HeaderField(p, "level"); err != nil || read(l) != 0 {
					t.Errorf("HeaderField(%s, level) = %+v, %v: want a leaf", p, l, err)
				}
			}
			f, err := fs.BlockGroupField("flags")
			if err != nil || read(f)&(BlockGroupData|BlockGroupMetadata|BlockGroupSystem) == 0 {
				t.Errorf("BlockGroupField(flags) = %+v (%#x), %v", f, read(f), err)
			}
			for _, bad := range []func() error{
				func() error { _, err := fs.SuperField("nope"); return err },
				func() error { _, err := fs.InodeField("d/f", "i_size"); return err },
				func() error { _, err := fs.DirItemField("d", "f", "rec_len"); return err },
				func() error { _, err := fs.BlockGroupField("bg_inode_table"); return err },
				func() error { _, err := fs.HeaderField("d/f", "x"); return err },
			} {
				if err := bad(); err == nil || !strings.Contains(err.Error(), "want one of") {
					t.Errorf("unknown field: err = %v", err)
				}
			}
			if _, err := fs.InodeField("d/none", "size"); !errors.Is(err, iofs.ErrNotExist) {
				t.Errorf("missing file: err = %v", err)
			}
			if _, err := fs.DirItemField("d", "none", "type"); !errors.Is(err, iofs.ErrNotExist) {
				t.Errorf("missing entry: err = %v", err)
			}
		})
	}
}
