package belowfs

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestFootprintRealGuest: a finding's footprint is a real profile of its
// last op on the lanes asked, the ops before it as setup (one that fails on
// every lane, as a trace's may, is let through): an 8 KiB write lands in
// ext2's data blocks and in btrfs's, and the structures add up to the
// sectors written. A crash finding's setup runs before its trace.
func TestFootprintRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := &session.Finding{ID: "f-1", Kind: "state-divergence", LaneSpecs: []string{"ext2"},
		Trace: []string{"write f-00 0 8192 0x55"}, Crash: &session.CrashPoint{Setup: []string{"unlink nope", "create f-00 0644"}}}
	got, err := FootprintOf(ctx, m, f, []string{"ext2", "btrfs"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", got)
	if len(got.Lanes) != 2 || got.Note != "" {
		t.Fatalf("%d lane footprints (%q), want ext2's and btrfs's", len(got.Lanes), got.Note)
	}
	for _, lf := range got.Lanes {
		// ext2's "data"; btrfs (mixed block groups here) "data+metadata".
		i := slices.IndexFunc(lf.ByRegion, func(r runreport.RegionSectors) bool { return strings.HasPrefix(r.Region, "data") })
		if lf.Errno != 0 || lf.Sectors < 16 || i < 0 || lf.ByRegion[i].Sectors < 16 {
			t.Errorf("lane %s: %+v; want the 8 KiB write's 16 sectors or more in data", lf.Lane, lf)
		}
		var sum int64
		for _, r := range lf.ByRegion {
			sum += r.Sectors
		}
		if sum != lf.Sectors {
			t.Errorf("lane %s: regions add up to %d sectors, the row says %d", lf.Lane, sum, lf.Sectors)
		}
	}
}
