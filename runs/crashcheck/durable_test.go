package crashcheck

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/fsimage"
)

// TestCheckDurable: a file read back from a real ext4 image is kept when
// it holds the fsync'd bytes, and lost, saying how, when a byte, the size
// or the file itself differs; after an fdatasync the inode is read, not
// the name; a fsync'd directory keeps its names, or says which it lost.
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
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fs, err := fsimage.Open(f, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	ino, err := fs.Lookup("/g")
	if err != nil {
		t.Fatal(err)
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
		{"fdatasync: the inode's data, under any name", durable{path: "renamed", ino: uint64(ino), datasync: true, content: content}, ""},
		{"fdatasync: a byte", durable{path: "g", ino: uint64(ino), datasync: true, content: flipped}, fmt.Sprintf("g (inode %d, fdatasync'd): byte 4321", ino)},
		{"a directory's names kept", durable{path: "", entries: []string{"g", "lost+found"}}, ""},
		{"a directory's name lost", durable{path: "", entries: []string{"g", "h", "lost+found"}}, "directory : h missing (fsync'd with 3 entries)"},
	} {
		got, err := checkDurable(img, &tt.d)
		if err != nil || (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

// TestUnreadableResponse: a walk that has entries the filesystem refused
// to read is unreadable like a walk that failed; a stale entry (ESTALE: an
// entry whose inode was never written) is told apart.
func TestUnreadableResponse(t *testing.T) {
	t.Parallel()
	fpResp := func(fp *agentv1.FingerprintResult) *agentv1.Response {
		return &agentv1.Response{Result: &agentv1.Response_Fingerprint{Fingerprint: fp}}
	}
	tests := []struct {
		name  string
		resp  *agentv1.Response
		want  string // "" readable
		stale bool
	}{
		{"read whole", fpResp(&agentv1.FingerprintResult{Entries: 3}), "", false},
		{"an entry refused", fpResp(&agentv1.FingerprintResult{Entries: 3, Unreadable: 1, FirstUnreadable: "d-00", FirstUnreadableErrno: 117}), "d-00: errno 117 (structure needs cleaning) (1 entries", false},
		{"a stale entry", fpResp(&agentv1.FingerprintResult{Entries: 3, Unreadable: 1, FirstUnreadable: "d-00/d-01", FirstUnreadableErrno: 116}), "d-00/d-01: errno 116 (stale file handle)", true},
		{"the walk failed", &agentv1.Response{Errno: 5, Error: "open root: input/output error"}, "input/output error", false},
		{"the walk stale", &agentv1.Response{Errno: 116, Error: "open root: stale file handle"}, "stale file handle", true},
	}
	for _, tt := range tests {
		err := unreadable(tt.resp)
		if staleEntry(err) != tt.stale {
			t.Errorf("%s: staleEntry(%v) = %v, want %v", tt.name, err, !tt.stale, tt.stale)
		}
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", tt.name, err)
		case tt.want != "" && (!errors.Is(err, errUnreadable) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want errUnreadable with %q", tt.name, err, tt.want)
		}
	}
}
