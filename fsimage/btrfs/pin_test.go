package btrfs

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestPin makes two images with mkfs.btrfs a second apart (different
// random UUIDs and times), pins both, and requires identical bytes that
// btrfs check finds clean, with the pinned values in place.
func TestPin(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("btrfs"); err != nil {
		t.Skip("btrfs not installed (Debian btrfs-progs)")
	}
	pins := Pins{Time: 1000000000}
	for i := range 16 {
		pins.DevUUID[i], pins.ChunkTreeUUID[i], pins.SubvolUUID[i] = 0xd0, 0xc0, byte(0xa0+i)
	}
	for _, tc := range []struct {
		name    string
		sizeMiB int
		args    []string
	}{
		{"mixed", 16, []string{"--mixed"}},
		{"dup-metadata", 128, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var imgs [2][]byte
			var paths [2]string
			for i := range imgs {
				if i == 1 {
					time.Sleep(1100 * time.Millisecond) // another mkfs time
				}
				paths[i] = mkfsTree(t, nil, tc.sizeMiB, append([]string{"-U", "7e3a1500-0000-4000-8000-000000000001"}, tc.args...)...)
				f, err := os.OpenFile(paths[i], os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := f.Stat()
				if err := Pin(f, st.Size(), pins); err != nil {
					t.Fatal(err)
				}
				f.Close()
				if imgs[i], err = os.ReadFile(paths[i]); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(imgs[0], imgs[1]) {
				n := 0
				for i := range imgs[0] {
					if imgs[0][i] != imgs[1][i] {
						if n < 8 {
							t.Errorf("byte %#x: %#x vs %#x", i, imgs[0][i], imgs[1][i])
						}
						n++
					}
				}
				t.Fatalf("pinned images differ in %d bytes", n)
			}
			if out, err := exec.Command("btrfs", "check", "--readonly", paths[0]).CombinedOutput(); err != nil {
				t.Fatalf("btrfs check: %v\n%s", err, out)
			}
			fs, err := Open(bytes.NewReader(imgs[0]), int64(len(imgs[0])))
			if err != nil {
				t.Fatal(err)
			}
			ri, err := fs.rootItem(FSTreeID)
			if err != nil {
				t.Fatal(err)
			}
			if fs.Superblock().DevUUID != pins.DevUUID || ri.UUID != pins.SubvolUUID {
				t.Errorf("dev uuid %x, subvolume uuid %x: not pinned", fs.Superblock().DevUUID, ri.UUID)
			}
			root, _, err := fs.node(fs.sb.ChunkRoot, fs.sb.ChunkLevel)
			if err != nil || !bytes.Equal(root[64:80], pins.ChunkTreeUUID[:]) {
				t.Errorf("chunk tree uuid %x, %v: not pinned", root[64:80], err)
			}
			ino, err := fs.Lookup("")
			if err != nil {
				t.Fatal(err)
			}
			in, err := fs.inodeTimes(ino)
			if err != nil || in != [4]int64{pins.Time, pins.Time, pins.Time, pins.Time} {
				t.Errorf("root directory times %v, %v; want %d", in, err, pins.Time)
			}
		})
	}
}

// inodeTimes reads an inode's atime, ctime, mtime and otime seconds.
func (fs *FS) inodeTimes(ino uint64) ([4]int64, error) {
	var out [4]int64
	k := Key{ino, TypeInodeItem, 0}
	err := fs.walk(fs.fsRoot, fs.fsLevel, k, k, func(it Item) error {
		for i, o := range inodeTimes {
			out[i] = int64(le.Uint64(it.Data[o:]))
		}
		return nil
	})
	return out, err
}
