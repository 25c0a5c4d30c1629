package fsimage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// testImage is a real image made by mkfs and populated by debugfs.
type testImage struct {
	name  string
	mkfs  string   // mkfs.ext2 or mkfs.ext4
	args  []string // mkfs arguments before the image path
	kib   int      // image size in KiB (= 1 KiB blocks count for -b 1024)
	frag  bool     // fragment free space before writing big2
	path  string
	files map[string][]byte // path in the image -> content written
}

var testImages = []*testImage{
	{name: "ext2-1k-128", mkfs: "mkfs.ext2", args: []string{"-I", "128", "-b", "1024"}, kib: 20000},
	{name: "ext2-rev0", mkfs: "mkfs.ext2", args: []string{"-r", "0", "-b", "1024"}, kib: 20000},
	{name: "ext4-1k-256-csum", mkfs: "mkfs.ext4", args: []string{"-I", "256", "-b", "1024", "-O", "64bit,metadata_csum"}, kib: 20000, frag: true},
	{name: "ext4-4k-256", mkfs: "mkfs.ext4", args: []string{"-I", "256", "-b", "4096", "-O", "64bit,metadata_csum,^flex_bg", "-g", "4096"}, kib: 40000, frag: true},
}

var (
	imagesOnce sync.Once
	imagesErr  error
	imagesDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if imagesDir != "" {
		os.RemoveAll(imagesDir)
	}
	os.Exit(code)
}

// needTools skips the test when e2fsprogs is missing.
func needTools(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"mkfs.ext2", "mkfs.ext4", "debugfs", "dumpe2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

func content(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func run(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// mkfs makes an empty image at path.
func mkfs(path, tool string, kib int, env []string, args ...string) error {
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return err
	}
	if err := os.Truncate(path, int64(kib)<<10); err != nil {
		return err
	}
	a := append([]string{"-q", "-F"}, args...)
	a = append(a, path)
	_, err := run(env, tool, a...)
	return err
}

// debugfsW runs a debugfs -w script on img.
func debugfsW(img string, script string) error {
	cmd := exec.Command("debugfs", "-w", "-f", "-", img)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("debugfs: %v: %s", err, out)
	}
	return nil
}

// debugfsR runs one read-only debugfs request.
func debugfsR(t testing.TB, img, req string) string {
	t.Helper()
	out, err := run(nil, "debugfs", "-R", req, img)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func buildImages() error {
	dir, err := os.MkdirTemp("", "fsimage-test-")
	if err != nil {
		return err
	}
	imagesDir = dir
	host := map[string][]byte{
		"small": []byte("hello, themis\n"),
		"big":   content(1, 300000), // 1 KiB blocks: direct, indirect and double indirect
		"big2":  content(2, 200000),
		"one":   content(3, 1024),
	}
	for name, b := range host {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	for _, im := range testImages {
		im.path = filepath.Join(dir, im.name+".img")
		if err := mkfs(im.path, im.mkfs, im.kib, []string{"E2FSPROGS_FAKE_TIME=1000000000"},
			append(im.args, "-U", "7e3a1500-0000-4000-8000-000000000001", "-E", "root_owner=0:0")...); err != nil {
			return err
		}
		var s strings.Builder
		fmt.Fprintf(&s, "mkdir d\nmkdir d/e\nwrite %s d/f\nwrite %s big\nsymlink s /d/f\n",
			filepath.Join(dir, "small"), filepath.Join(dir, "big"))
		im.files = map[string][]byte{"/d/f": host["small"], "/big": host["big"], "d/e/../f": host["small"]}
		if im.frag {
			for i := range 40 {
				fmt.Fprintf(&s, "write %s frag%d\n", filepath.Join(dir, "one"), i)
			}
			for i := 0; i < 40; i += 2 {
				fmt.Fprintf(&s, "rm frag%d\n", i)
			}
			fmt.Fprintf(&s, "write %s d/e/big2\n", filepath.Join(dir, "big2"))
			im.files["/d/e/big2"] = host["big2"]
			im.files["/frag1"] = host["one"]
		}
		if err := debugfsW(im.path, s.String()); err != nil {
			return err
		}
	}
	return nil
}

// images returns the built test images, skipping when tools are missing.
func images(t testing.TB) []*testImage {
	t.Helper()
	needTools(t)
	imagesOnce.Do(func() { imagesErr = buildImages() })
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
	return testImages
}

func openImage(t testing.TB, im *testImage) *FS {
	t.Helper()
	f, err := os.Open(im.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	fs, err := Open(f, st.Size())
	if err != nil {
		t.Fatalf("Open(%s): %v", im.name, err)
	}
	return fs
}
