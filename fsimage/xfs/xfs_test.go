package xfs

import (
	"bytes"
	"errors"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/fsimage"
)

// mkfsProto makes a 300 MiB xfs image with mkfs.xfs -p: d/ holding f (4096
// bytes of 'A') and g (empty), and top (5000 bytes of 'B') at the root.
func mkfsProto(t testing.TB) []byte {
	t.Helper()
	bin, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mkfs.xfs not installed (Debian xfsprogs)")
		}
		t.Skip("mkfs.xfs not installed (Debian xfsprogs)")
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := write("f", bytes.Repeat([]byte{'A'}, 4096))
	g := write("g", nil)
	top := write("top", bytes.Repeat([]byte{'B'}, 5000))
	proto := write("proto", []byte(strings.Join([]string{"/dev/null", "0 0", "d--755 0 0",
		"d d--755 0 0", "f ---644 0 0 " + f, "g ---644 0 0 " + g, "$",
		"top ---600 1000 1000 " + top, "$", ""}, "\n")))
	img := filepath.Join(dir, "xfs.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 300<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-q", "-f", "-p", proto, img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v\n%s", err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRealImage(t *testing.T) {
	t.Parallel()
	img := mkfsProto(t)
	fs, err := Open(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	sb := fs.Superblock()
	if sb.BlockSize != 4096 || sb.InodeSize != 512 || sb.AGCount == 0 {
		t.Errorf("superblock %+v", sb)
	}
	read := func(f Field) uint64 {
		t.Helper()
		var v uint64
		for i := f.Size - 1; i >= 0; i-- {
			v = v<<8 | uint64(img[f.Phys-int64(i)])
		}
		return v
	}
	for _, c := range []struct {
		path    string
		size    uint64
		mode    uint64
		uid     uint64
		content byte
	}{{"d/f", 4096, 0o100644, 0, 'A'}, {"top", 5000, 0o100600, 1000, 'B'}, {"d/g", 0, 0o100644, 0, 0}} {
		for field, want := range map[string]uint64{"size": c.size, "mode": c.mode, "uid": c.uid, "nlink": 1} {
			f, err := fs.InodeField(c.path, field)
			if err != nil || read(f) != want {
				t.Errorf("InodeField(%s, %s) = %+v (%d), %v; want %d", c.path, field, f, read(f), err, want)
			}
		}
		if c.size == 0 {
			if _, err := fs.FileByte(c.path, 0); !errors.Is(err, iofs.ErrNotExist) {
				t.Errorf("FileByte(%s, 0) of an empty file: %v", c.path, err)
			}
			continue
		}
		for _, off := range []uint64{0, c.size - 1} {
			p, err := fs.FileByte(c.path, off)
			if err != nil || img[p] != c.content {
				t.Errorf("FileByte(%s, %d) = %d, %v: want a %q", c.path, off, p, err, c.content)
			}
		}
	}
	if f, err := fs.SuperField("magicnum"); err != nil || read(f) != Magic || !bytes.Equal(img[f.Phys-3:f.Phys+1], []byte("XFSB")) {
		t.Errorf("SuperField(magicnum) = %+v, %v", f, err)
	}
	if f, err := fs.SuperField("icount"); err != nil || read(f) < 5 {
		t.Errorf("SuperField(icount) = %+v (%d), %v", f, read(f), err)
	}
	if f, err := fs.AGFField("magicnum"); err != nil || !bytes.Equal(img[f.Phys-3:f.Phys+1], []byte("XAGF")) {
		t.Errorf("AGFField(magicnum) = %+v, %v", f, err)
	}
	if f, err := fs.AGIField("magicnum"); err != nil || !bytes.Equal(img[f.Phys-3:f.Phys+1], []byte("XAGI")) {
		t.Errorf("AGIField(magicnum) = %+v, %v", f, err)
	}
	d, err := fs.Lookup("d")
	if err != nil {
		t.Fatal(err)
	}
	fIno, err := fs.Lookup("d/f")
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]uint64{"namelen": 1, "inumber": fIno.Ino, "ftype": 1} {
		f, err := fs.EntryField("d", "f", field)
		if err != nil || read(f) != want || !strings.Contains(f.Where, "in "+itoa(d.Ino)) {
			t.Errorf("EntryField(d, f, %s) = %+v (%d), %v; want %d", field, f, read(f), err, want)
		}
	}
	for _, bad := range []func() error{
		func() error { _, err := fs.SuperField("s_magic"); return err },
		func() error { _, err := fs.InodeField("d/f", "i_size"); return err },
		func() error { _, err := fs.EntryField("d", "f", "rec_len"); return err },
		func() error { _, err := fs.AGFField("x"); return err },
	} {
		if err := bad(); err == nil || !strings.Contains(err.Error(), "want one of") {
			t.Errorf("unknown field: %v", err)
		}
	}
	if _, err := fs.Lookup("d/nope"); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("missing name: %v", err)
	}
	if _, err := fs.Lookup("d/f/x"); err == nil {
		t.Error("lookup through a file succeeded")
	}
	if _, err := Open(bytes.NewReader(make([]byte, 4096)), 4096); !errors.Is(err, fsimage.ErrCorrupt) {
		t.Errorf("zeros: %v", err)
	}
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
