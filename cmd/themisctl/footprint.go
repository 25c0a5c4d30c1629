package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
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
// found, duplicates and kinds without a replayable trace left out with the
// reason: the trace before the op is the setup (its ops may fail as they
// did in the run), the op alone is profiled.
func footprints(ctx context.Context, c *conn, req *themisv1.ExploreRequest, run *exploreRun, n int) map[string]footprint {
	out := make(map[string]footprint, len(run.found.order))
	measured := 0
	for _, id := range run.found.order {
		f := run.found.byID[id]
		switch {
		case f.GetDuplicateOf() != "":
			out[id] = footprint{note: "not measured: a duplicate of " + f.GetDuplicateOf()}
		case len(f.GetTrace()) == 0:
			out[id] = footprint{note: "not measured: found at the root state, before any op"}
		case singleLane(f.GetKind()) || f.GetKind() == "guest-died":
			out[id] = footprint{note: "not measured: a " + f.GetKind() + " finding has no op to profile"}
		case measured >= n:
			out[id] = footprint{note: fmt.Sprintf("not measured: past --report-footprints %d", n)}
		default:
			measured++
			fmt.Fprintf(os.Stderr, "footprint of %s's last op: profiling it on a fresh guest (%d of at most %d)\n", id, measured, n)
			lanes, err := profileLastOp(ctx, c, req, fullTrace(f))
			if err != nil {
				out[id] = footprint{note: "not measured: " + err.Error()}
				continue
			}
			out[id] = footprint{lanes: lanes}
		}
	}
	return out
}

// fullTrace is f's ops from a fresh session: a crash finding's setup (the
// search's path) before its trace.
func fullTrace(f *themisv1.Finding) []string {
	return append(slices.Clone(f.GetCrash().GetSetup()), f.GetTrace()...)
}

// profileLastOp profiles trace's last op after the rest of it, on req's
// lanes.
func profileLastOp(ctx context.Context, c *conn, req *themisv1.ExploreRequest, trace []string) ([]runreport.LaneFootprint, error) {
	last := trace[len(trace)-1]
	setup := append(slices.Clone(trace[:len(trace)-1]), "sync") // never empty: empty is the default setup
	stream, err := c.Profile(ctx, &themisv1.ProfileRequest{Lanes: req.GetLanes(), Setup: setup, Ops: []string{last},
		SetupMayFail: true, MemoryMib: req.GetMemoryMib()})
	if err != nil {
		return nil, err
	}
	var lanes []runreport.LaneFootprint
	err = client.Drain(stream.Recv, func(r *themisv1.ProfileResponse) error {
		if row := r.GetRow(); row != nil {
			lanes = append(lanes, laneFootprint(row))
		}
		return nil
	})
	return lanes, err
}

// laneFootprint is a profile row's writes by structure, largest first.
func laneFootprint(row *themisv1.ProfileRow) runreport.LaneFootprint {
	by := map[string]int64{}
	for _, r := range row.GetWrittenLbas() {
		by[orDefault(r.GetRegion(), "unlabelled")] += int64(r.GetCount())
	}
	lf := runreport.LaneFootprint{Lane: row.GetLane(), Errno: row.GetErrno(), Sectors: int64(row.GetSectorsWritten())}
	for region, n := range by {
		lf.ByRegion = append(lf.ByRegion, runreport.RegionSectors{Region: region, Sectors: n})
	}
	slices.SortFunc(lf.ByRegion, func(a, b runreport.RegionSectors) int {
		if a.Sectors != b.Sectors {
			return int(b.Sectors - a.Sectors)
		}
		return strings.Compare(a.Region, b.Region)
	})
	return lf
}
