package btrfs

import (
	"bytes"
	"errors"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/fsimage"
)

// tree is what mkfsTree puts in an image: path -> content (nil: a
// directory).
type tree map[string][]byte

func testTree() tree {
	r := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 300_000)
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	t := tree{
		"d":     nil,
		"d/f":   bytes.Repeat([]byte{'A'}, 4096),
		"d/g":   {},
		"small": []byte("hello inline world 22b"), // inline: under max_inline
		"big":   big,
		"many":  nil,
	}
	// Enough names that the FS tree has interior nodes (4 KiB nodes).
	for i := range 300 {
		t["many/file"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+itoa(i)] = []byte(itoa(i * 7))
	}
	return t
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// mkfsTree makes a btrfs image of sizeMiB holding t0 with mkfs.btrfs
// --rootdir (nil t0: a plain mkfs), skipping the test when btrfs-progs is
// not installed.
func mkfsTree(t testing.TB, t0 tree, sizeMiB int, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("mkfs.btrfs")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mkfs.btrfs not installed (Debian btrfs-progs)")
		}
		t.Skip("mkfs.btrfs not installed (Debian btrfs-progs)")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, b := range t0 {
		full := filepath.Join(root, p)
		if b == nil {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, int64(sizeMiB)<<20); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-q", "-f", "-K"}, args...)
	if t0 != nil {
		args = append(args, "--rootdir", root)
	}
	cmd := exec.Command(bin, append(args, img)...)
	cmd.Env = append(os.Environ(), "BLKID_FILE=/dev/null") // see guest's base images: no blkid cache
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkfs.btrfs: %v\n%s", err, out)
	}
	return img
}

func openImage(t *testing.T, img string) (*FS, []byte) {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return fs, b
}

// TestRealImages reads images mkfs.btrfs made from a directory tree (mixed
// block groups, and separate ones with DUP metadata) and checks every file
// against the tree: kind, size, content through the extents, and that
// FileByte points at the byte on the image.
func TestRealImages(t *testing.T) {
	t.Parallel()
	tr := testTree()
	for _, tc := range []struct {
		name    string
		sizeMiB int
		args    []string
		kind    string // of a data byte's region
		copies  int    // of a metadata block
	}{
		{"mixed", 32, []string{"--mixed"}, KindMixed, 1},
		{"dup-metadata", 128, nil, KindData, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs, img := openImage(t, mkfsTree(t, tr, tc.sizeMiB, tc.args...))
			sb := fs.Superblock()
			if sb.SectorSize != 4096 || sb.NumDevices != 1 || len(fs.Chunks()) < 2 {
				t.Fatalf("superblock %+v, %d chunks", sb, len(fs.Chunks()))
			}
			for p, want := range tr {
				ino, err := fs.Lookup(p)
				if err != nil {
					t.Fatalf("Lookup(%q): %v", p, err)
				}
				in, err := fs.Inode(ino)
				if err != nil {
					t.Fatal(err)
				}
				if want == nil {
					if !in.IsDir() {
						t.Errorf("%s: mode %#o, want a directory", p, in.Mode)
					}
					continue
				}
				if !in.IsRegular() || in.Size != uint64(len(want)) {
					t.Errorf("%s: mode %#o size %d, want a regular file of %d", p, in.Mode, in.Size, len(want))
				}
				got, err := fs.ReadFile(ino, 1<<20)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: ReadFile: %d bytes, %v; want the %d written", p, len(got), err, len(want))
				}
				for _, off := range []int{0, len(want) / 2, len(want) - 1} {
					if len(want) == 0 {
						break
					}
					loc, err := fs.FileByte(p, uint64(off))
					if err != nil {
						t.Fatalf("FileByte(%q, %d): %v", p, off, err)
					}
					if img[loc.Phys] != want[off] {
						t.Errorf("%s byte %d: image has %#x at %d, file %#x", p, off, img[loc.Phys], loc.Phys, want[off])
					}
					if loc.Inline != (len(want) < 2048) {
						t.Errorf("%s: inline %v", p, loc.Inline)
					}
				}
			}
			// A data byte's region; a metadata block's copies.
			loc, err := fs.FileByte("d/f", 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := fs.Locate(uint64(loc.Phys) / SectorSize).Kind; got != tc.kind {
				t.Errorf("d/f's data is in a %s region, want %s", got, tc.kind)
			}
			if p, err := fs.Physical(sb.Root); err != nil || len(p) != tc.copies {
				t.Errorf("root tree copies %v, %v; want %d", p, err, tc.copies)
			}
			checkLayout(t, fs, int64(len(img)))
		})
	}
}

func checkLayout(t *testing.T, fs *FS, size int64) {
	t.Helper()
	var next uint64
	kinds := map[string]bool{}
	for _, r := range fs.Layout() {
		if r.FirstLBA != next || r.Sectors == 0 {
			t.Fatalf("layout is not a partition at %+v (next %d)", r, next)
		}
		next = r.End()
		kinds[r.Kind] = true
	}
	if next != uint64(size)/SectorSize {
		t.Errorf("layout ends at %d, image has %d sectors", next, size/SectorSize)
	}
	if r := fs.Locate(SuperblockOffset / SectorSize); r.Kind != KindSuperblock || r.Sectors != SuperblockSize/SectorSize {
		t.Errorf("Locate(128) = %+v, want the superblock", r)
	}
	if r := fs.Locate(1 << 40); r.Kind != KindOutside {
		t.Errorf("Locate past the end = %+v", r)
	}
	if !kinds[KindSystem] || !kinds[KindUnallocated] {
		t.Errorf("layout kinds %v: want system and unallocated", kinds)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	fs, img := openImage(t, mkfsTree(t, tree{"d": nil, "d/f": []byte(strings.Repeat("x", 5000)), "e": {}}, 16, "--mixed"))
	for _, c := range []struct {
		path string
		off  uint64
		want error
	}{
		{"nope", 0, iofs.ErrNotExist},
		{"d/nope", 0, iofs.ErrNotExist},
		{"d/f", 5000, iofs.ErrNotExist}, // past the end
		{"e", 0, iofs.ErrNotExist},      // empty
		{"d/../d/f", 0, fsimage.ErrUnsupported},
	} {
		if _, err := fs.FileByte(c.path, c.off); !errors.Is(err, c.want) {
			t.Errorf("FileByte(%q, %d) = %v, want %v", c.path, c.off, err, c.want)
		}
	}
	if _, err := fs.FileByte("d", 0); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FileByte(dir) = %v", err)
	}
	if _, err := fs.Lookup(strings.Repeat("a/", MaxLookupDepth+1)); !errors.Is(err, fsimage.ErrTooLarge) {
		t.Errorf("deep lookup: %v", err)
	}
	// A flipped bit in a tree block fails its checksum.
	loc, err := fs.FileByte("d/f", 0)
	if err != nil {
		t.Fatal(err)
	}
	leaf := append([]byte(nil), img...)
	root, err := fs.Physical(fs.fsRoot)
	if err != nil {
		t.Fatal(err)
	}
	leaf[root[0]+200] ^= 1
	bad, err := Open(bytes.NewReader(leaf), int64(len(leaf)))
	if err == nil {
		_, err = bad.FileByte("d/f", 0)
	}
	if !errors.Is(err, fsimage.ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("flipped FS tree: %v, want a checksum error", err)
	}
	// A flipped data bit is not metadata: the tree still reads.
	data := append([]byte(nil), img...)
	data[loc.Phys] ^= 1
	if f2, err := Open(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Error(err)
	} else if got, err := f2.ReadFile(mustLookup(t, f2, "d/f"), 1<<20); err != nil || got[0] != 'x'^1 {
		t.Errorf("ReadFile after a data flip: %q..., %v", got[:1], err)
	}
	// The superblock: magic and checksum.
	for _, off := range []int{SuperblockOffset + 0x40, SuperblockOffset + 0x90} {
		b := append([]byte(nil), img...)
		b[off] ^= 1
		if _, err := Open(bytes.NewReader(b), int64(len(b))); !errors.Is(err, fsimage.ErrCorrupt) {
			t.Errorf("flip at %#x: %v, want ErrCorrupt", off, err)
		}
	}
	if _, err := Open(bytes.NewReader(img[:SuperblockOffset]), SuperblockOffset); !errors.Is(err, fsimage.ErrCorrupt) {
		t.Errorf("short image: %v", err)
	}
}

func mustLookup(t *testing.T, fs *FS, p string) uint64 {
	t.Helper()
	ino, err := fs.Lookup(p)
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// TestNameHash checks btrfs_name_hash (crc32c seeded with ~1, no final
// inversion) against a bitwise CRC-32C; TestRealImages finds every name of
// a real image through it.
func TestNameHash(t *testing.T) {
	t.Parallel()
	raw := func(seed uint32, b []byte) uint32 {
		crc := seed
		for _, c := range b {
			crc ^= uint32(c)
			for range 8 {
				if crc&1 != 0 {
					crc = crc>>1 ^ 0x82F63B78
				} else {
					crc >>= 1
				}
			}
		}
		return crc
	}
	for _, s := range []string{"", "a", "d", "lost+found", "file123", strings.Repeat("z", 255)} {
		if got, want := nameHash(s), uint64(raw(^uint32(1), []byte(s))); got != want {
			t.Errorf("nameHash(%q) = %#x, want %#x", s, got, want)
		}
	}
}
