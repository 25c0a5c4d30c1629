package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// TestDiffRealGuest: the disk at a checkpoint against itself is equal; after
// a mkdir and a sync, the raw and the normalized diff both show sectors, in
// labelled structures.
func TestDiffRealGuest(t *testing.T) {
	env := vmmtest.Setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := Open(ctx, Config{StateDir: t.TempDir(), CacheDir: env.CacheDir, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}()
	info, err := m.Create(ctx, CreateOptions{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(s string) {
		t.Helper()
		op, err := opspec.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		req, err := opspec.Request(op)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Apply(ctx, info.ID, req); err != nil {
			t.Fatal(err)
		}
	}
	apply("sync")
	c, err := m.Fork(ctx, info.ID, "before", OriginManual)
	if err != nil {
		t.Fatal(err)
	}
	same, err := m.Diff(ctx, info.ID, "ext2", "before", c.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if same.RawSectors != 0 {
		t.Errorf("a checkpoint against itself: %d raw sectors", same.RawSectors)
	}
	apply("mkdir d-00 0755")
	apply("sync")
	d, err := m.Diff(ctx, info.ID, "ext2", "before", Current, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mkdir: raw %d sectors, normalized %d, %d ranges, %d masked", d.RawSectors, d.NormalizedSectors, len(d.Ranges), len(d.Masked))
	if d.RawSectors == 0 || d.NormalizedSectors == 0 || len(d.Ranges) == 0 || d.Ranges[0].Region == "" {
		t.Errorf("mkdir left no labelled normalized diff: %+v", d)
	}
	if _, err := m.Diff(ctx, info.ID, "ext2", "nope", Current, false); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalid) {
		t.Errorf("diff from an unknown checkpoint: %v", err)
	}
	if _, err := m.Diff(ctx, info.ID, "zfs", "before", Current, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("diff of an unknown lane: %v", err)
	}
}
