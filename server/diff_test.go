package server

import (
	"context"
	"strings"
	"testing"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestDiffDisksSides checks Diff's inputs across sessions and lanes on fake
// machines over real base images (mkfs): nothing runs in the guests, so
// equal specs give equal disks.
func TestDiffDisksSides(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	ctx := context.Background()
	var ids []string
	for _, lanes := range [][]string{{"ext2", "ext2:name=b"}, {"ext2"}, {"ext2:size=16"}} {
		in, err := m.Create(ctx, session.CreateOptions{Lanes: lanes})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	cur := func(id, lane string) session.DiffSide {
		return session.DiffSide{Session: id, Lane: lane, At: session.Current}
	}
	for _, tt := range []struct {
		name string
		a, b session.DiffSide
	}{
		{"one lane", cur(ids[0], "ext2"), session.DiffSide{At: session.Current}},
		{"two lanes", cur(ids[0], "ext2"), session.DiffSide{Lane: "b", At: session.Current}},
		{"two sessions", cur(ids[0], "ext2"), session.DiffSide{Session: ids[1], At: session.Current}},
		{"two sessions, reversed", cur(ids[1], "ext2"), session.DiffSide{Session: ids[0], Lane: "b", At: session.Current}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := diffDisks(ctx, m, tt.a, tt.b, true)
			if err != nil {
				t.Fatal(err)
			}
			if d.RawSectors != 0 || d.NormalizedSectors != 0 {
				t.Errorf("fresh disks of one spec: raw %d, normalized %d sectors", d.RawSectors, d.NormalizedSectors)
			}
		})
	}

	for _, tt := range []struct {
		name  string
		a, b  session.DiffSide
		kind  error
		field string
		msg   string
	}{
		{"no session", session.DiffSide{Lane: "ext2", At: session.Current}, session.DiffSide{At: session.Current}, errkind.ErrInvalid, "session_id", ""},
		{"no lane", session.DiffSide{Session: ids[0], At: session.Current}, session.DiffSide{At: session.Current}, errkind.ErrInvalid, "lane", ""},
		{"no from", session.DiffSide{Session: ids[0], Lane: "ext2"}, session.DiffSide{At: session.Current}, errkind.ErrInvalid, "from", ""},
		{"no to", cur(ids[0], "ext2"), session.DiffSide{Session: ids[1]}, errkind.ErrInvalid, "to", ""},
		{"unknown session_b", cur(ids[0], "ext2"), session.DiffSide{Session: "s-nope", At: session.Current}, errkind.ErrNotFound, "", "session_b"},
		{"unknown session_id", cur("s-nope", "ext2"), session.DiffSide{Session: ids[0], At: session.Current}, errkind.ErrNotFound, "", "session_id"},
		{"unknown lane", cur(ids[0], "zfs"), session.DiffSide{At: session.Current}, errkind.ErrInvalid, "lane", ""},
		{"unknown lane_b", cur(ids[0], "ext2"), session.DiffSide{Session: ids[1], Lane: "b", At: session.Current}, errkind.ErrInvalid, "lane_b", ""},
		{"unknown checkpoint b", cur(ids[0], "ext2"), session.DiffSide{Session: ids[1], At: "c-9"}, errkind.ErrNotFound, "", "to"},
		{"sizes", cur(ids[0], "ext2"), session.DiffSide{Session: ids[2], Lane: "ext2:size=16", At: session.Current}, errkind.ErrInvalid, "lane_b", "is 8388608 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := diffDisks(ctx, m, tt.a, tt.b, false)
			sessiontest.WantErr(t, err, tt.kind, tt.field)
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q, want it to mention %q", err, tt.msg)
			}
		})
	}
	// The sessions are still usable: every lock was released.
	if _, err := diffDisks(ctx, m, cur(ids[2], "ext2:size=16"), session.DiffSide{At: session.Current}, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := m.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
