package guest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestParseDebugfsTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  string
		want InodeTimes
	}{
		{
			name: "128-byte inode clamped",
			out: "Inode: 12   Type: regular\n ctime: 0x7fffffff -- Tue Jan 19 03:14:07 2038\n" +
				" atime: 0x7fffffff -- Tue Jan 19 03:14:07 2038\n mtime: 0x7fffffff -- Tue Jan 19 03:14:07 2038\n",
			want: InodeTimes{Atime: 1<<31 - 1, Mtime: 1<<31 - 1, Ctime: 1<<31 - 1},
		},
		{
			name: "256-byte inode with epoch bits and ns",
			out: " ctime: 0x80000000:00000001 -- Tue Jan 19 03:14:08 2038\n" +
				" atime: 0x00000001:00000004 -- x\n mtime: 0x80000000:00000001 -- x\n",
			want: InodeTimes{Atime: 1, AtimeNs: 1, Mtime: 1 << 31, Ctime: 1 << 31},
		},
		{
			name: "pre-1970",
			out:  " ctime: 0xffffffff -- x\n atime: 0xffffffff -- x\n mtime: 0xffffffff -- x\n",
			want: InodeTimes{Atime: -1, Mtime: -1, Ctime: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseDebugfsTimes([]byte(tt.out))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := parseDebugfsTimes([]byte("debugfs: File not found by ext2_lookup")); err == nil {
		t.Error("no error for output without timestamps")
	}
}

// TestExtInodeTimesSandboxed reads a file's times with the real debugfs,
// which runs in internal/sandbox, from an image mkfs.ext4 filled.
func TestExtInodeTimesSandboxed(t *testing.T) {
	t.Parallel()
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("mkfs.ext4 not installed (Debian e2fsprogs)")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "tree", "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Unix(1234567890, 0)
	if err := os.Chtimes(f, when, when); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(dir, "lane.img")
	if out, err := exec.Command(mkfs, "-q", "-I", "256", "-d", filepath.Join(dir, "tree"), image, "8M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	got, err := ExtInodeTimes(context.Background(), image, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if got.Mtime != when.Unix() {
		t.Errorf("mtime = %d, want %d", got.Mtime, when.Unix())
	}
	if _, err := ExtInodeTimes(context.Background(), filepath.Join(dir, "missing.img"), "/f"); err == nil {
		t.Errorf("ExtInodeTimes of a missing image: no error")
	}
}
