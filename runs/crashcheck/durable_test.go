package crashcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDurable: a file read back from a real ext4 image is kept when
// it holds the fsync'd bytes, and lost, saying how, when a byte, the size
// or the file itself differs.
func TestCheckDurable(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required under CI=true (Debian e2fsprogs): %v", tool, err)
			}
			t.Skipf("skipped: %s not installed (Debian e2fsprogs)", tool)
		}
	}
	dir := t.TempDir()
	img, src := filepath.Join(dir, "ext4.img"), filepath.Join(dir, "g")
	content := []byte(strings.Repeat("fsync'd ", 1000))
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"truncate", "-s", "16M", img}, {"mkfs.ext4", "-q", "-F", img}, {"debugfs", "-w", "-R", "write " + src + " g", img}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	flipped := append([]byte(nil), content...)
	flipped[4321] ^= 1
	for _, tt := range []struct {
		name string
		d    durable
		want string
	}{
		{"kept", durable{path: "g", content: content}, ""},
		{"a byte", durable{path: "g", content: flipped}, "g: byte 4321"},
		{"the size", durable{path: "g", content: content[:100]}, "g: 8000 bytes, fsync'd with 100"},
		{"the file", durable{path: "d/h", content: content}, "d/h: missing"},
	} {
		got, err := checkDurable(img, &tt.d)
		if err != nil || (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}
