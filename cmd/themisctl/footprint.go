package main

import (
	"context"
	"fmt"
	"os"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/runreport"
)

// defaultFootprints and maxFootprints: the findings whose last op a run
// report profiles below the filesystem by default, and at most (each is a
// fresh guest).
const (
	defaultFootprints = 3
	maxFootprints     = 50
)

// footprint is one finding's footprint on the page, or why there is none.
type footprint struct {
	lanes []runreport.LaneFootprint
	note  string
}

// checkFootprints validates a --report-footprints / --footprints value.
func checkFootprints(flag string, n int) error {
	if n < 0 || n > maxFootprints {
		return fmt.Errorf("--%s %d: want 0 (none) to %d (each is a fresh guest)", flag, n, maxFootprints)
	}
	return nil
}

// footprints profiles the last op of up to n findings of run, in the order
// found, on the run's lanes (the Footprint RPC: belowfs.FootprintOf); a
// finding with no op to profile, or past n, says why it has none.
func footprints(ctx context.Context, c *conn, req *themisv1.ExploreRequest, run *exploreRun, n int) map[string]footprint {
	out := make(map[string]footprint, len(run.found.order))
	measured := 0
	for _, id := range run.found.order {
		if measured >= n {
			out[id] = footprint{note: fmt.Sprintf("not measured: past --report-footprints %d", n)}
			continue
		}
		fp, err := c.Footprint(ctx, &themisv1.FootprintRequest{FindingId: id, Lanes: req.GetLanes(), MemoryMib: req.GetMemoryMib()})
		if err != nil {
			out[id] = footprint{note: "not measured: " + err.Error()}
			continue
		}
		if fp.GetNote() != "" {
			out[id] = footprint{note: fp.GetNote()}
			continue
		}
		measured++
		fmt.Fprintf(os.Stderr, "footprint of %s's last op: profiled on a fresh guest (%d of at most %d)\n", id, measured, n)
		out[id] = footprint{lanes: runFootprint(fp)}
	}
	return out
}

// runFootprint is a Footprint response as the run report draws it.
func runFootprint(fp *themisv1.FootprintResponse) []runreport.LaneFootprint {
	var out []runreport.LaneFootprint
	for _, l := range fp.GetLanes() {
		lf := runreport.LaneFootprint{Lane: l.GetLane(), Errno: l.GetErrno(), Sectors: l.GetSectors()}
		for _, r := range l.GetByRegion() {
			lf.ByRegion = append(lf.ByRegion, runreport.RegionSectors{Region: r.GetRegion(), Sectors: r.GetSectors()})
		}
		out = append(out, lf)
	}
	return out
}
