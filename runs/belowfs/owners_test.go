package belowfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/themisfs/themis/fsimage"
)

// TestBlockOwners checks blockOwners on a real ext2 image made by mke2fs
// from a directory against debugfs's "blocks" of every path.
func TestBlockOwners(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (Debian e2fsprogs)", tool)
		}
	}
	src := t.TempDir()
	files := map[string]int{"f": 3000, "d/g": 70 << 10, "d/e/h": 1, "empty": 0} // d/g needs an indirect block
	for p, n := range files {
		full := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		// Not zeros: mke2fs -d leaves zero blocks as holes.
		if err := os.WriteFile(full, []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 80 { // a directory of several blocks
		if err := os.WriteFile(filepath.Join(src, "d/e", "file-with-a-long-name-"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(t.TempDir(), "img")
	if out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext2", "-b", "1024", "-I", "128", "-d", src, img, "4096").CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v: %s", err, out)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	fs, err := fsimage.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	own := blockOwners(fs)
	for _, p := range []string{"/", "/lost+found", "/f", "/d", "/d/g", "/d/e", "/d/e/h", "/empty"} {
		out, err := exec.Command("debugfs", "-R", "blocks "+p, img).Output()
		if err != nil {
			t.Fatalf("debugfs blocks %s: %v", p, err)
		}
		blocks := strings.Fields(string(out))
		if p == "/empty" && len(blocks) != 0 {
			t.Errorf("%s: debugfs lists blocks %v", p, blocks)
		}
		if p == "/d/e" && len(blocks) < 2 {
			t.Errorf("%s: %d blocks, want a directory of several", p, len(blocks))
		}
		for _, b := range blocks {
			n, err := strconv.ParseUint(b, 10, 64)
			if err != nil {
				t.Fatalf("debugfs blocks %s: %q", p, b)
			}
			for _, lba := range []uint64{2 * n, 2*n + 1} {
				if got := own.of(lba); got != p {
					t.Errorf("sector %d (block %d of %s): owner %q", lba, n, p, got)
				}
			}
		}
	}
	// d/g's indirect block is d/g's too; the superblock and inode table are no file's.
	ino, err := fs.Lookup("d/g")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := fs.MetaBlocks(ino)
	if err != nil || len(meta) == 0 {
		t.Fatalf("d/g: indirect blocks %v, %v; want one", meta, err)
	}
	if got := own.of(2 * meta[0]); got != "/d/g" {
		t.Errorf("indirect block %d: owner %q, want /d/g", meta[0], got)
	}
	for _, lba := range []uint64{0, 2, 3} {
		if got := own.of(lba); got != "" {
			t.Errorf("sector %d: owner %q, want none", lba, got)
		}
	}
	// Labelled runs split where the owner changes.
	runs := labelRuns([]uint64{2, 3, 2 * meta[0], 2*meta[0] + 1}, extLayout{fs}, own)
	if len(runs) != 2 || runs[0].Path != "" || runs[1].Path != "/d/g" || runs[1].Count != 2 {
		t.Errorf("labelRuns = %+v", runs)
	}
}
