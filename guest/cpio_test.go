package guest

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func testArchive(t *testing.T) *cpioArchive {
	t.Helper()
	a := newCPIOArchive()
	steps := []error{
		a.Dir("tmp", fs.ModeSticky|0o777),
		a.Dir("modules", 0o755),
		a.Dir("dev", 0o755),
		a.File("modules/order", 0o644, []byte("a.ko\nb.ko\n")),
		a.File("modules/a.ko", 0o644, []byte("A")), // odd sizes exercise padding
		a.File("modules/b.ko", 0o644, []byte("BBBBB")),
		a.File("/init", 0o755, bytes.Repeat([]byte{0x7f}, 4099)),
		a.File("empty", 0o600, nil),
		a.CharDev("dev/console", 0o600, 5, 1),
	}
	for _, err := range steps {
		if err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func TestCPIORoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	n, err := testArchive(t).WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Errorf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not a multiple of 4", buf.Len())
	}
	got := parseNewc(t, buf.Bytes())
	type rec struct {
		name      string
		ino, mode uint32
		nlink     uint32
		rdev      [2]uint32
		data      string
	}
	want := []rec{
		{"dev", 1, 0o040755, 2, [2]uint32{}, ""},
		{"dev/console", 2, 0o020600, 1, [2]uint32{5, 1}, ""},
		{"empty", 3, 0o100600, 1, [2]uint32{}, ""},
		{"init", 4, 0o100755, 1, [2]uint32{}, strings.Repeat("\x7f", 4099)},
		{"modules", 5, 0o040755, 2, [2]uint32{}, ""},
		{"modules/a.ko", 6, 0o100644, 1, [2]uint32{}, "A"},
		{"modules/b.ko", 7, 0o100644, 1, [2]uint32{}, "BBBBB"},
		{"modules/order", 8, 0o100644, 1, [2]uint32{}, "a.ko\nb.ko\n"},
		{"tmp", 9, 0o041777, 2, [2]uint32{}, ""},
	}
	var gotRecs []rec
	for _, r := range got {
		if r.UID != 0 || r.GID != 0 || r.Mtime != 0 || r.DevMajor != 0 || r.DevMinor != 0 {
			t.Errorf("%s: uid %d gid %d mtime %d dev %d:%d, want all 0", r.Name, r.UID, r.GID, r.Mtime, r.DevMajor, r.DevMinor)
		}
		gotRecs = append(gotRecs, rec{r.Name, r.Ino, r.Mode, r.Nlink, [2]uint32{r.RMajor, r.RMinor}, string(r.Data)})
	}
	if !reflect.DeepEqual(gotRecs, want) {
		t.Errorf("records:\n got %+v\nwant %+v", gotRecs, want)
	}

	// Deterministic: the same entries added in another order give the same bytes.
	b := newCPIOArchive()
	for _, name := range []string{"dev", "modules", "tmp"} {
		perm := fs.FileMode(0o755)
		if name == "tmp" {
			perm = fs.ModeSticky | 0o777
		}
		if err := b.Dir(name, perm); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		b.CharDev("dev/console", 0o600, 5, 1),
		b.File("init", 0o755, bytes.Repeat([]byte{0x7f}, 4099)),
		b.File("modules/b.ko", 0o644, []byte("BBBBB")),
		b.File("modules/a.ko", 0o644, []byte("A")),
		b.File("empty", 0o600, nil),
		b.File("modules/order", 0o644, []byte("a.ko\nb.ko\n")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	var buf2 bytes.Buffer
	if _, err := b.WriteTo(&buf2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), buf2.Bytes()) {
		t.Error("same entries in another order gave different bytes")
	}
}

func TestCPIOErrors(t *testing.T) {
	t.Parallel()
	a := newCPIOArchive()
	if err := a.File("x", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.File("/x", 0o644, nil); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("duplicate entry: err = %v", err)
	}
	if err := a.File("/", 0o644, nil); err == nil {
		t.Error("empty name accepted")
	}
	if err := a.File("d/y", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err == nil || !strings.Contains(err.Error(), `parent directory "d"`) {
		t.Errorf("missing parent: err = %v", err)
	}
}

// TestCPIOWithCpioTool checks the archive with GNU cpio, an independent
// reader: it must list and extract every entry.
func TestCPIOWithCpioTool(t *testing.T) {
	t.Parallel()
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		t.Skip("skipping: cpio not installed (apt-get install cpio)")
	}
	var buf bytes.Buffer
	if _, err := testArchive(t).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	list := exec.Command(cpio, "-t", "--quiet")
	list.Stdin = bytes.NewReader(buf.Bytes())
	out, err := list.Output()
	if err != nil {
		t.Fatalf("cpio -t: %v", err)
	}
	wantList := "dev\ndev/console\nempty\ninit\nmodules\nmodules/a.ko\nmodules/b.ko\nmodules/order\ntmp\n"
	if string(out) != wantList {
		t.Errorf("cpio -t:\n%s\nwant\n%s", out, wantList)
	}
	dir := t.TempDir()
	// Device nodes need root to extract; list-only is enough for them.
	extract := exec.Command(cpio, "-i", "-d", "--quiet", "--no-absolute-filenames", "modules/*", "init")
	extract.Dir = dir
	extract.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v: %s", err, out)
	}
	for name, want := range map[string]string{"modules/order": "a.ko\nb.ko\n", "modules/b.ko": "BBBBB", "init": strings.Repeat("\x7f", 4099)} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "init"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("init mode %v, want 0755", st.Mode())
	}
}
