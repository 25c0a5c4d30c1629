package session

import (
	"context"
	"strings"
	"testing"
)

// TestDiffSides checks Diff's inputs across sessions and lanes on fake
// machines over real base images (mkfs): nothing runs in the guests, so
// equal specs give equal disks.
func TestDiffSides(t *testing.T) {
	m, _ := fakeManager(t, t.TempDir(), Config{})
	ctx := context.Background()
	var ids []string
	for _, lanes := range [][]string{{"ext2", "ext2:name=b"}, {"ext2"}, {"ext2:size=16"}} {
		in, err := m.Create(ctx, CreateOptions{Lanes: lanes})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	cur := func(id, lane string) DiffSide { return DiffSide{Session: id, Lane: lane, At: Current} }
	for _, tt := range []struct {
		name string
		a, b DiffSide
	}{
		{"one lane", cur(ids[0], "ext2"), DiffSide{At: Current}},
		{"two lanes", cur(ids[0], "ext2"), DiffSide{Lane: "b", At: Current}},
		{"two sessions", cur(ids[0], "ext2"), DiffSide{Session: ids[1], At: Current}},
		{"two sessions, reversed", cur(ids[1], "ext2"), DiffSide{Session: ids[0], Lane: "b", At: Current}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := m.Diff(ctx, tt.a, tt.b, true)
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
		a, b  DiffSide
		kind  error
		field string
		msg   string
	}{
		{"no session", DiffSide{Lane: "ext2", At: Current}, DiffSide{At: Current}, ErrInvalid, "session_id", ""},
		{"no lane", DiffSide{Session: ids[0], At: Current}, DiffSide{At: Current}, ErrInvalid, "lane", ""},
		{"no from", DiffSide{Session: ids[0], Lane: "ext2"}, DiffSide{At: Current}, ErrInvalid, "from", ""},
		{"no to", cur(ids[0], "ext2"), DiffSide{Session: ids[1]}, ErrInvalid, "to", ""},
		{"unknown session_b", cur(ids[0], "ext2"), DiffSide{Session: "s-nope", At: Current}, ErrNotFound, "", "session_b"},
		{"unknown session_id", cur("s-nope", "ext2"), DiffSide{Session: ids[0], At: Current}, ErrNotFound, "", "session_id"},
		{"unknown lane", cur(ids[0], "zfs"), DiffSide{At: Current}, ErrInvalid, "lane", ""},
		{"unknown lane_b", cur(ids[0], "ext2"), DiffSide{Session: ids[1], Lane: "b", At: Current}, ErrInvalid, "lane_b", ""},
		{"unknown checkpoint b", cur(ids[0], "ext2"), DiffSide{Session: ids[1], At: "c-9"}, ErrNotFound, "", "to"},
		{"sizes", cur(ids[0], "ext2"), DiffSide{Session: ids[2], Lane: "ext2:size=16", At: Current}, ErrInvalid, "lane_b", "is 8388608 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Diff(ctx, tt.a, tt.b, false)
			wantErr(t, err, tt.kind, tt.field)
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q, want it to mention %q", err, tt.msg)
			}
		})
	}
	// The sessions are still usable: every lock was released.
	if _, err := m.Diff(ctx, cur(ids[2], "ext2:size=16"), DiffSide{At: Current}, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := m.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
