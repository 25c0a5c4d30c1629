package scratch

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// TestSweep checks which entries a sweep removes: unlocked RAM files and
// owned dirs under their names, however young (what a daemon SIGKILLed a
// moment ago leaves), and those under a staging name once old; never a
// held one, a young staging one, a dir without an owner file, or a name it
// does not know. Before staging names, a young unlocked entry stayed for
// the grace (5 minutes in the daemon).
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
	stagingRAM := file(StagingPrefix+"themis-ram-staging", false)
	oldStagingRAM := file(StagingPrefix+"themis-ram-old-staging", true)
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
	stagingDir := func(isOld bool) string { // its owner killed before it locked it
		t.Helper()
		p, err := os.MkdirTemp(dir, StagingPrefix+"themis-")
		if err == nil {
			err = os.WriteFile(filepath.Join(p, OwnerFile), nil, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		if isOld {
			age(p)
		}
		return p
	}
	youngStaging, oldStaging := stagingDir(false), stagingDir(true)
	foreign := filepath.Join(dir, "themis-1000") // e.g. the socket dir: no owner file
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	age(foreign)

	removed, err := Sweep(dir, "themis-ram-", time.Minute, zaptest.NewLogger(t), "themis-")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{left.Path, leftRAM, youngRAM, young.Path, oldStagingRAM, oldStaging}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, p := range []string{liveRAM, stagingRAM, other, live.Path, youngStaging, foreign} {
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

// TestOwnedBeforeNamed: MkdirTemp and CreateFile leave an entry under its
// name that is locked from the start (a sweep right away keeps it) and no
// staging entry; CreateFile refuses a name that exists and leaves nothing.
func TestOwnedBeforeNamed(t *testing.T) {
	dir := t.TempDir()
	d, err := MkdirTemp(dir, "themis-")
	if err != nil {
		t.Fatal(err)
	}
	f, lock, err := CreateFile(filepath.Join(dir, "themis-ram-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(d.Path, OwnerFile), filepath.Join(dir, "themis-ram-a")} {
		if _, err := LockFile(p); !errors.Is(err, unix.EWOULDBLOCK) {
			t.Errorf("LockFile(%s): %v, want EWOULDBLOCK (held by its owner)", p, err)
		}
	}
	if removed, err := Sweep(dir, "themis-ram-", time.Hour, zaptest.NewLogger(t), "themis-"); err != nil || len(removed) != 0 {
		t.Errorf("Sweep of held entries: removed %v, %v", removed, err)
	}
	if _, _, err := CreateFile(filepath.Join(dir, "themis-ram-a")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateFile over an existing file: %v, want fs.ErrExist", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{filepath.Base(d.Path), "themis-ram-a"}; !slices.Equal(names, want) {
		t.Errorf("entries %v, want %v (no staging name left)", names, want)
	}
	if err := errors.Join(d.Remove(), os.Remove(filepath.Join(dir, "themis-ram-a")), lock.Close()); err != nil {
		t.Fatal(err)
	}
}
