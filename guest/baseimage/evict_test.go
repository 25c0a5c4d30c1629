package baseimage

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/hosttool"
)

// TestEvict: the least recently used images go first until the cache fits;
// the image just made, images used lately and temporaries stay.
func TestEvict(t *testing.T) {
	t.Parallel()
	const kib = 1 << 10
	old := time.Now().Add(-time.Hour)
	tests := []struct {
		name    string
		files   map[string]time.Duration // name -> age (written 64 KiB each)
		keep    string
		max     int64
		removed []string
	}{
		{"fits", map[string]time.Duration{"a.img": time.Hour, "b.img": 2 * time.Hour}, "a.img", 1 << 30, nil},
		{"oldest first", map[string]time.Duration{"a.img": time.Hour, "b.img": 3 * time.Hour, "c.img": 2 * time.Hour}, "a.img", 100 * kib, []string{"b.img", "c.img"}},
		{"just enough", map[string]time.Duration{"a.img": time.Hour, "b.img": 3 * time.Hour, "c.img": 2 * time.Hour}, "a.img", 130 * kib, []string{"b.img"}},
		{"keep spared", map[string]time.Duration{"a.img": 5 * time.Hour, "b.img": time.Hour}, "a.img", 0, []string{"b.img"}},
		{"recent spared", map[string]time.Duration{"a.img": time.Hour, "b.img": time.Minute, "c.img": 2 * time.Hour}, "a.img", 0, []string{"c.img"}},
		{"temporaries and others ignored", map[string]time.Duration{"a.img": time.Hour, ".mkfs-1.img": 5 * time.Hour, "notes.txt": 5 * time.Hour}, "a.img", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, age := range tt.files {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, make([]byte, 64*kib), 0o444); err != nil {
					t.Fatal(err)
				}
				at := time.Now().Add(-age)
				if err := os.Chtimes(p, old, at); err != nil {
					t.Fatal(err)
				}
			}
			removed, err := evict(dir, filepath.Join(dir, tt.keep), tt.max)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range removed {
				got = append(got, filepath.Base(p))
			}
			if !slices.Equal(got, tt.removed) {
				t.Errorf("removed %v, want %v", got, tt.removed)
			}
			for name := range tt.files {
				_, err := os.Stat(filepath.Join(dir, name))
				if gone := slices.Contains(tt.removed, name); gone != os.IsNotExist(err) {
					t.Errorf("%s: stat %v, removed %v", name, err, gone)
				}
			}
		})
	}
}

// TestMakerBoundsTheCache makes two real images under a cap that holds
// one: the older, unused for an hour, is evicted when the second is made,
// and a cache hit marks an image used.
func TestMakerBoundsTheCache(t *testing.T) {
	t.Parallel()
	if _, err := hosttool.Look("mkfs.ext2"); err != nil {
		t.Skip(err)
	}
	ctx, dir := context.Background(), t.TempDir()
	mk := Maker(1) // any second image exceeds it
	first, err := mk(ctx, dir, mustSpec(t, "ext2:size=4"))
	if err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(first, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	if again, err := mk(ctx, dir, mustSpec(t, "ext2:size=4")); err != nil || again != first {
		t.Fatalf("cache hit: %s, %v; want %s", again, err, first)
	}
	if fi, err := os.Stat(first); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Fatalf("a cache hit did not mark the image used: %v, %v", fi, err)
	}
	if err := os.Chtimes(first, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	second, err := mk(ctx, dir, mustSpec(t, "ext2:size=5"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Errorf("the least recently used image is still cached (%v) after a second was made over the cap", err)
	}
	if _, err := os.Stat(second); err != nil {
		t.Errorf("the image just made: %v", err)
	}
}

func mustSpec(t *testing.T, s string) guest.LaneSpec {
	t.Helper()
	sp, err := guest.ParseLaneSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}
