package scratch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// TestSweep checks which entries a sweep removes: only unlocked, old
// RAM files and owned dirs; never a held one, a young one, a dir without
// an owner file, or a name it does not know.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	age := func(p string) {
		t.Helper()
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name string, isOld bool) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("ram"), 0o600); err != nil {
			t.Fatal(err)
		}
		if isOld {
			age(p)
		}
		return p
	}
	ownedDir := func(isOld bool) *Dir {
		t.Helper()
		d, err := MkdirTemp(dir, "themis-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.Path, "state.qcow2"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if isOld {
			age(d.Path)
		}
		return d
	}

	leftRAM := file("themis-ram-left", true)
	liveRAM := file("themis-ram-live", true)
	lock, err := LockFile(liveRAM)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	youngRAM := file("themis-ram-young", false)
	other := file("other-ram-x", true)

	left := ownedDir(true)
	if err := left.lock.Close(); err != nil { // its owner died
		t.Fatal(err)
	}
	live := ownedDir(true)
	defer live.Remove()
	young := ownedDir(false)
	if err := young.lock.Close(); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "themis-1000") // e.g. the socket dir: no owner file
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	age(foreign)

	removed, err := Sweep(dir, "themis-ram-", "themis-", time.Minute, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{left.Path, leftRAM}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, p := range []string{liveRAM, youngRAM, other, live.Path, young.Path, foreign} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: want it kept: %v", p, err)
		}
	}
	if err := live.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(live.Path); !os.IsNotExist(err) {
		t.Errorf("%s after Remove: %v", live.Path, err)
	}
}

// TestSweepAged removes by age and name only.
func TestSweepAged(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	tests := []struct {
		name     string
		dir, old bool
		removed  bool
	}{
		{".mkfs-1.img", false, true, true},
		{".seed-2", true, true, true},
		{".mkfs-3.img", false, false, false},
		{"base.img", false, true, false},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, tt.name)
		var err error
		if tt.dir {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, nil, 0o600)
		}
		if err == nil && tt.old {
			err = os.Chtimes(p, old, old)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := SweepAged(dir, []string{".mkfs-", ".seed-"}, 30*time.Minute, zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		_, err := os.Lstat(filepath.Join(dir, tt.name))
		if gone := os.IsNotExist(err); gone != tt.removed {
			t.Errorf("%s: removed %v, want %v", tt.name, gone, tt.removed)
		}
	}
}
