package belowfs

import (
	"context"
	"strings"
	"testing"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestFootprintNotes: a finding with no op to profile gets a note saying
// why, and no session is made for it.
func TestFootprintNotes(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	trace := []string{"mkdir d-00 0755"}
	for _, tc := range []struct {
		f    session.Finding
		want string
	}{
		{session.Finding{ID: "f-root", Kind: "state-divergence"}, "at the root state"},
		{session.Finding{ID: "f-dup", Kind: "state-divergence", Trace: trace, DuplicateOf: "f-1"}, "a duplicate of f-1"},
		{session.Finding{ID: "f-r", Kind: "self-reference:remount", Trace: trace}, "no op to profile"},
		{session.Finding{ID: "f-g", Kind: "guest-died", Trace: trace}, "no op to profile"},
	} {
		fp, err := FootprintOf(context.Background(), m, &tc.f, []string{"ext2"}, 0)
		if err != nil || len(fp.Lanes) != 0 || !strings.Contains(fp.Note, tc.want) {
			t.Errorf("%s: %+v, %v; want no lanes and a note with %q", tc.f.ID, fp, err, tc.want)
		}
	}
	if got, err := m.List(context.Background(), true); err != nil || len(got) != 0 {
		t.Errorf("sessions: %v, %v; want none", got, err)
	}
}
