package fsimage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maskedDiff returns the byte offsets where a and b differ outside every
// range in masks.
func maskedDiff(a, b []byte, masks ...[]ByteRange) []int64 {
	masked := make([]bool, len(a))
	for _, m := range masks {
		for _, r := range m {
			for i := r.Offset; i < r.Offset+int64(r.Len) && i < int64(len(a)); i++ {
				masked[i] = true
			}
		}
	}
	var out []int64
	for i := range a {
		if a[i] != b[i] && !masked[i] {
			out = append(out, int64(i))
		}
	}
	return out
}

// TestNuisanceFigure5 reproduces the paper's Figure 5: two fresh mkfs with
// different random UUIDs, hash seeds and creation times, the same
// operations, differ raw but not once nuisance is masked; one extra
// operation still shows.
func TestNuisanceFigure5(t *testing.T) {
	needTools(t)
	for _, tc := range []struct {
		name string
		tool string
		args []string
		kib  int
	}{
		{"ext2-4MiB", "mkfs.ext2", []string{"-I", "128", "-b", "1024"}, 4096},
		{"ext2-3groups", "mkfs.ext2", []string{"-I", "256", "-b", "1024"}, 20000},
		{"ext4-csum", "mkfs.ext4", []string{"-I", "256", "-b", "1024", "-O", "64bit,metadata_csum"}, 20000},
		{"ext4-4k", "mkfs.ext4", []string{"-I", "256", "-b", "4096", "-g", "4096"}, 40000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			small := filepath.Join(dir, "small")
			if err := os.WriteFile(small, []byte("same bytes\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			big := filepath.Join(dir, "big")
			if err := os.WriteFile(big, content(7, 100000), 0o644); err != nil {
				t.Fatal(err)
			}
			ops := fmt.Sprintf("mkdir d\nwrite %s d/f\nwrite %s big\nsymlink s /d/f\nrm d/f\nwrite %s d/g\n", small, big, small)
			var imgs [2][]byte
			var fss [2]*FS
			var masks [2][]ByteRange
			for i := range imgs {
				p := filepath.Join(dir, fmt.Sprintf("%d.img", i))
				env := []string{fmt.Sprintf("E2FSPROGS_FAKE_TIME=%d", 1000000000+i*1000)}
				if err := mkfs(p, tc.tool, tc.kib, env, tc.args...); err != nil {
					t.Fatal(err)
				}
				if err := debugfsW(p, ops); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				imgs[i] = b
				if fss[i], err = Open(bytes.NewReader(b), int64(len(b))); err != nil {
					t.Fatal(err)
				}
				if masks[i], err = NuisanceRanges(fss[i]); err != nil {
					t.Fatal(err)
				}
			}
			if fss[0].Superblock().UUID == fss[1].Superblock().UUID {
				t.Fatal("mkfs made equal UUIDs")
			}
			raw := maskedDiff(imgs[0], imgs[1])
			if len(raw) == 0 {
				t.Fatal("raw images equal")
			}
			if d := maskedDiff(imgs[0], imgs[1], masks[0], masks[1]); len(d) != 0 {
				var s []string
				for _, o := range d[:min(len(d), 20)] {
					s = append(s, fmt.Sprintf("%d (%+v)", o, fss[0].Locate(uint64(o/SectorSize))))
				}
				t.Fatalf("%d bytes differ after masking (raw %d), first: %s", len(d), len(raw), strings.Join(s, ", "))
			}
			for _, r := range masks[0] {
				if r.Field == "" || r.Len <= 0 || r.Offset < 0 || r.Offset+int64(r.Len) > int64(len(imgs[0])) {
					t.Fatalf("bad range %+v", r)
				}
			}
			// The exported Diff agrees: raw sectors > 0, normalized 0.
			d, err := Diff(bytes.NewReader(imgs[0]), bytes.NewReader(imgs[1]), int64(len(imgs[0])), true)
			if err != nil {
				t.Fatal(err)
			}
			if d.RawSectors == 0 || d.NormalizedSectors != 0 || len(d.Ranges) != 0 || len(d.Masked) == 0 {
				t.Errorf("Diff: raw %d, normalized %d, %d ranges, %d masked; want raw > 0, normalized 0", d.RawSectors, d.NormalizedSectors, len(d.Ranges), len(d.Masked))
			}
			// One more operation survives normalization.
			p := filepath.Join(dir, "1.img")
			if err := debugfsW(p, "mkdir extra\n"); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := Open(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			m, err := NuisanceRanges(fs)
			if err != nil {
				t.Fatal(err)
			}
			if d := maskedDiff(imgs[0], b, masks[0], m); len(d) == 0 {
				t.Error("an extra mkdir vanished under normalization")
			}
			d, err = Diff(bytes.NewReader(imgs[0]), bytes.NewReader(b), int64(len(b)), true)
			if err != nil {
				t.Fatal(err)
			}
			if d.NormalizedSectors == 0 || len(d.Ranges) == 0 || d.Ranges[0].Region == "" {
				t.Errorf("Diff after an extra mkdir: normalized %d sectors, ranges %v", d.NormalizedSectors, d.Ranges)
			}
		})
	}
}

func TestNuisanceFieldsNamed(t *testing.T) {
	for _, im := range images(t) {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fs := openImage(t, im)
			m, err := NuisanceRanges(fs)
			if err != nil {
				t.Fatal(err)
			}
			fields := map[string]bool{}
			for _, r := range m {
				fields[r.Field] = true
			}
			want := []string{"s_mtime", "s_wtime", "s_lastcheck", "s_uuid", "s_hash_seed", "s_checksum",
				"group 0 bg_checksum", "inode 2 i_atime", "inode 2 i_ctime", "inode 2 i_mtime", "inode 2 i_dtime", "inode 2 i_generation"}
			sb := fs.Superblock()
			if sb.InodeSize > 128 {
				want = append(want, "inode 2 i_ctime_extra", "inode 2 i_mtime_extra", "inode 2 i_atime_extra", "inode 2 i_crtime", "inode 2 i_crtime_extra")
			}
			if sb.HasMetadataCsum() {
				want = append(want, "inode 2 i_checksum_lo", "inode 2 i_checksum_hi", "inode 2 dirent tail det_checksum", "group 0 bg_block_bitmap_csum_hi")
			}
			if sb.FeatureCompat&CompatHasJournal != 0 {
				want = append(want, "journal s_uuid")
			}
			for _, w := range want {
				if !fields[w] {
					t.Errorf("no %q range", w)
				}
			}
			// The paper's offsets (Figure 5), at the primary superblock
			// and root inode.
			lba, off, _ := fs.InodeLocation(2)
			root := int64(lba*SectorSize) + int64(off)
			at := map[string]int64{}
			for _, r := range m {
				at[r.Field] = r.Offset
			}
			for f, o := range map[string]int64{
				"s_mtime": 1024 + 44, "s_wtime": 1024 + 48, "s_lastcheck": 1024 + 64, "s_uuid": 1024 + 104,
				"s_hash_seed": 1024 + 236, "s_checksum": 1024 + 1020,
				"inode 2 i_atime": root + 8, "inode 2 i_ctime": root + 12, "inode 2 i_mtime": root + 16,
				"inode 2 i_dtime": root + 20, "inode 2 i_generation": root + 100,
			} {
				if at[f] != o {
					t.Errorf("%s at %d, want %d", f, at[f], o)
				}
			}
		})
	}
}
