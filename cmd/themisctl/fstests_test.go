package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestFSTestsTarget: where a finding's test goes in a checkout and in a
// plain directory, numbered as fstests' tools/nextid numbers, never over
// an existing file.
func TestFSTestsTarget(t *testing.T) {
	t.Parallel()
	checkout := t.TempDir()
	for _, f := range []string{"check", "tests/ext4/001", "tests/ext4/001.out", "tests/ext4/002-name", "tests/ext4/004", "tests/ext4/Makefile", "tests/ext4/group.list", "tests/generic/999"} {
		p := filepath.Join(checkout, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(checkout, "common"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	tests := []struct {
		root, fs, name string
		test, dir, err string
	}{
		{root: checkout, fs: "ext2", test: "ext4/003", dir: "tests/ext4"},
		{root: checkout, fs: "ext4", name: "ext4/010", test: "ext4/010", dir: "tests/ext4"},
		{root: checkout, fs: "vfat", test: "generic/001", dir: "tests/generic"},
		{root: checkout, fs: "xfs", test: "xfs/001", dir: "tests/xfs"},
		{root: empty, fs: "btrfs", test: "btrfs/001", dir: "tests/btrfs"},
		{root: checkout, fs: "ext4", name: "ext4/004", err: "exists: nothing is replaced"},
		{root: checkout, fs: "ext4", name: "ext4/01", err: "want DIR/NNN"},
		{root: checkout, fs: "ext4", name: "../../x/001", err: "want DIR/NNN"},
	}
	for _, tc := range tests {
		test, dir, err := fstestsTarget(tc.root, tc.fs, tc.name)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("fstestsTarget(%s, %q): error %v, want one saying %q", tc.fs, tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || test != tc.test || dir != filepath.Join(tc.root, tc.dir) {
			t.Errorf("fstestsTarget(%s, %q) = %s, %s, %v; want %s, %s", tc.fs, tc.name, test, dir, err, tc.test, tc.dir)
		}
	}
	if !isFSTestsCheckout(checkout) || isFSTestsCheckout(empty) {
		t.Error("isFSTestsCheckout: a checkout is one with ./check and common/")
	}
}

// TestLaneOf picks the lane a test runs as by spec or lane name.
func TestLaneOf(t *testing.T) {
	t.Parallel()
	specs := []string{"ext2:inode_size=128", "vfat"}
	for want, fs := range map[string]string{"": "ext2", "vfat": "vfat", "ext2:inode_size=128": "ext2"} {
		sp, err := laneOf(specs, want)
		if err != nil || sp.FS != fs {
			t.Errorf("laneOf(%q) = %v, %v; want %s", want, sp.FS, err, fs)
		}
	}
	if _, err := laneOf(specs, "xfs"); err == nil {
		t.Error("laneOf(xfs): no error")
	}
}

// TestExportWriterRemove: an fstests export that fails takes back the
// files it made in the checkout, and only those.
func TestExportWriterRemove(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "001"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := newExportWriter(root)
	if err := w.file(&themisv1.ExportFile{Name: "002", Data: []byte("half"), Size: 8}); err != nil {
		t.Fatal(err)
	}
	if err := w.file(&themisv1.ExportFile{Name: "001", Data: []byte("x"), Size: 1}); err == nil {
		t.Error("the writer replaced an existing file")
	}
	w.remove()
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "002")); !os.IsNotExist(err) {
		t.Errorf("002 is still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "001")); err != nil || string(b) != "theirs" {
		t.Errorf("001 = %q, %v; want the file that was there", b, err)
	}
}
