package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestFootprintRealGuest: a run report's footprint of a finding's last op
// is a real profile on the run's lanes, the ops before it as setup (one
// that fails on every lane, as a trace's may, is let through): an 8 KiB
// write lands in ext2's data blocks and in btrfs's, and the structures add
// up to the sectors written; of the findings, only
// as many as asked are profiled, and a duplicate or a root finding says
// why it has none.
func TestFootprintRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sock := startDaemon(t, bin, dir, env.CacheDir)
	g := &globals{}
	g.conn.addr = "unix://" + sock
	c, err := connect(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &themisv1.ExploreRequest{Lanes: []string{"ext2", "btrfs"}}
	trace := []string{"unlink nope", "create f-00 0644", "write f-00 0 8192 0x55"}
	run := &exploreRun{}
	for _, f := range []*themisv1.Finding{
		{Id: "f-root", Kind: "state-divergence"},
		{Id: "f-1", Kind: "state-divergence", Trace: trace},
		{Id: "f-dup", Kind: "state-divergence", Trace: trace, DuplicateOf: "f-1"},
		{Id: "f-2", Kind: "errno-divergence", Trace: trace[1:]},
	} {
		run.found.add(f)
	}
	fps := footprints(ctx, c, req, run, 1)
	for id, want := range map[string]string{"f-root": "at the root state", "f-dup": "a duplicate of f-1", "f-2": "past --report-footprints 1"} {
		if fp := fps[id]; fp.lanes != nil || !strings.Contains(fp.note, want) {
			t.Errorf("%s: footprint %+v, want none, saying %q", id, fp, want)
		}
	}
	got := fps["f-1"]
	t.Logf("f-1: %+v", got)
	if len(got.lanes) != 2 {
		t.Fatalf("f-1: %d lane footprints (%s), want ext2's and btrfs's", len(got.lanes), got.note)
	}
	for _, lf := range got.lanes {
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
