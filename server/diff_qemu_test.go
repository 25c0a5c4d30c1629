package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestDiffDisksRealGuest: the disk at a checkpoint against itself is equal; after
// a mkdir and a sync, the raw and the normalized diff both show sectors, in
// labelled structures.
func TestDiffDisksRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
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
	c, err := m.Fork(ctx, info.ID, "before", session.OriginManual)
	if err != nil {
		t.Fatal(err)
	}
	same, err := diffDisks(ctx, m, session.DiffSide{Session: info.ID, Lane: "ext2", At: "before"}, session.DiffSide{At: c.ID}, true)
	if err != nil {
		t.Fatal(err)
	}
	if same.RawSectors != 0 {
		t.Errorf("a checkpoint against itself: %d raw sectors", same.RawSectors)
	}
	apply("mkdir d-00 0755")
	apply("sync")
	d, err := diffDisks(ctx, m, session.DiffSide{Session: info.ID, Lane: "ext2", At: "before"}, session.DiffSide{At: session.Current}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mkdir: raw %d sectors, normalized %d, %d ranges, %d masked", d.RawSectors, d.NormalizedSectors, len(d.Ranges), len(d.Masked))
	if d.RawSectors == 0 || d.NormalizedSectors == 0 || len(d.Ranges) == 0 || d.Ranges[0].Region == "" {
		t.Errorf("mkdir left no labelled normalized diff: %+v", d)
	}
	if _, err := diffDisks(ctx, m, session.DiffSide{Session: info.ID, Lane: "ext2", At: "nope"}, session.DiffSide{At: session.Current}, false); !errors.Is(err, errkind.ErrNotFound) && !errors.Is(err, errkind.ErrInvalid) {
		t.Errorf("diff from an unknown checkpoint: %v", err)
	}
	if _, err := diffDisks(ctx, m, session.DiffSide{Session: info.ID, Lane: "zfs", At: "before"}, session.DiffSide{At: session.Current}, false); !errors.Is(err, errkind.ErrInvalid) {
		t.Errorf("diff of an unknown lane: %v", err)
	}
}

// TestDiffDisksSessionsRealGuest is Figure 5 across sessions: two guests on
// ext2 run the same ops; their disks differ raw (timestamps) and not once
// normalized; one extra op in the second still shows after normalization.
func TestDiffDisksSessionsRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ids [2]string
	for i := range ids {
		info, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = info.ID
	}
	apply := func(id, s string) {
		t.Helper()
		op, err := opspec.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		req, err := opspec.Request(op)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Apply(ctx, id, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Errno != 0 {
				t.Fatalf("%s on %s: errno %d", s, id, r.Errno)
			}
		}
	}
	for _, id := range ids {
		for _, s := range []string{"mkdir d 0755", "create d/f 0644", "write d/f 0 5000 0x61", "link d/f g", "sync"} {
			apply(id, s)
		}
	}
	a, b := session.DiffSide{Session: ids[0], Lane: "ext2", At: session.Current}, session.DiffSide{Session: ids[1], At: session.Current}
	same, err := diffDisks(ctx, m, a, b, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("same ops: raw %d sectors, normalized %d, %d masked runs", same.RawSectors, same.NormalizedSectors, len(same.Masked))
	if same.NormalizedSectors != 0 {
		t.Errorf("same ops in two sessions: %d normalized sectors, want 0: %+v", same.NormalizedSectors, same.Ranges)
	}
	if same.RawSectors == 0 || len(same.Masked) == 0 {
		t.Errorf("same ops in two sessions: raw %d sectors, %d masked: want the timestamps to differ raw", same.RawSectors, len(same.Masked))
	}
	// The other direction locks the sessions in the same order and agrees.
	back, err := diffDisks(ctx, m, session.DiffSide{Session: ids[1], Lane: "ext2", At: session.Current}, session.DiffSide{Session: ids[0], At: session.Current}, true)
	if err != nil || back.RawSectors != same.RawSectors || back.NormalizedSectors != 0 {
		t.Errorf("reverse diff: %+v, %v", back, err)
	}
	apply(ids[1], "mkdir e 0755")
	apply(ids[1], "sync")
	extra, err := diffDisks(ctx, m, a, b, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one extra mkdir: raw %d sectors, normalized %d, %d ranges", extra.RawSectors, extra.NormalizedSectors, len(extra.Ranges))
	if extra.NormalizedSectors == 0 {
		t.Errorf("an extra mkdir in one session: 0 normalized sectors")
	}
}
