package exploration

import (
	"context"
	"errors"
	"testing"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestReplayRefuses: Replay refuses, before it boots anything, a crash or
// kernel finding (naming finding_id) and the stock image with another
// (naming stock).
func TestReplayRefuses(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	for _, tc := range []struct {
		f     session.Finding
		on    ReplayOn
		field string
	}{
		{session.Finding{ID: "f-c", Kind: session.KindCrash, LaneSpecs: []string{"ext4"}}, ReplayOn{}, "finding_id"},
		{session.Finding{ID: "f-k", Kind: session.KindKernel, LaneSpecs: []string{"ext4"}}, ReplayOn{}, "finding_id"},
		{session.Finding{ID: "f-1", Kind: KindRemount, LaneSpecs: []string{"ext4"}}, ReplayOn{Image: "bug-x", Stock: true}, "stock"},
	} {
		_, err := Replay(context.Background(), m, &tc.f, tc.on)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Replay(%s, %+v): %v, want a FieldError on %s", tc.f.Kind, tc.on, err, tc.field)
		}
	}
	if n, err := m.List(context.Background(), true); err != nil || len(n) != 0 {
		t.Errorf("sessions after refused replays: %v, %v; want none", n, err)
	}
}

// TestBisectRefuses: Bisect refuses, before it boots anything, fewer than
// two images or more than MaxBisectImages (naming images) and an empty one
// (naming it).
func TestBisectRefuses(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	f := &session.Finding{ID: "f-1", Kind: "errno", LaneSpecs: []string{"ext2", "vfat"}}
	many := make([]string, MaxBisectImages+1)
	for i := range many {
		many[i] = "img"
	}
	for _, tc := range []struct {
		images []string
		field  string
	}{{[]string{"a"}, "images"}, {many, "images"}, {[]string{"a", ""}, "images[1]"}} {
		_, err := Bisect(context.Background(), m, f, tc.images)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Bisect(%d images): %v, want a FieldError on %s", len(tc.images), err, tc.field)
		}
	}
}
