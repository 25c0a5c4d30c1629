package belowfs

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/session"
)

// Footprint is a finding's last op profiled below the filesystem (its
// sectors written by structure, per lane, as a run report draws them), or
// why it was not.
type Footprint struct {
	Finding string
	Lanes   []runreport.LaneFootprint
	// Note says why there is no footprint ("": there is one).
	Note string
}

// FootprintOf profiles finding f's last op on lanes (nil: f's own) with
// memoryMiB of guest RAM (0: the default), after the ops before it (a
// crash finding's setup first; their errnos as they come) and a sync, in a
// session of its own. A duplicate, a finding at the root state, a
// self-reference and a guest-died finding have no op to profile: the
// footprint says why.
func FootprintOf(ctx context.Context, m *session.Manager, f *session.Finding, lanes []string, memoryMiB int) (*Footprint, error) {
	fp := &Footprint{Finding: f.ID}
	var trace []string
	if f.Crash != nil {
		trace = slices.Clone(f.Crash.Setup)
	}
	trace = append(trace, f.Trace...)
	switch {
	case f.DuplicateOf != "":
		fp.Note = "not measured: a duplicate of " + f.DuplicateOf
	case len(f.Trace) == 0:
		fp.Note = "not measured: found at the root state, before any op"
	case strings.HasPrefix(f.Kind, "self-reference:") || f.Kind == api.Died:
		fp.Note = "not measured: a " + f.Kind + " finding has no op to profile"
	}
	if fp.Note != "" {
		return fp, nil
	}
	if len(lanes) == 0 {
		lanes = f.LaneSpecs
	}
	setup := append(slices.Clone(trace[:len(trace)-1]), "sync") // never empty: empty is the default setup
	_, err := Profile(ctx, m, ProfileOptions{Lanes: lanes, Setup: setup, Ops: trace[len(trace)-1:], SetupMayFail: true, MemoryMiB: memoryMiB},
		func(r ProfileRow) { fp.Lanes = append(fp.Lanes, laneFootprint(r)) })
	if err != nil {
		return nil, err
	}
	return fp, nil
}

// laneFootprint is a profile row's writes by structure, largest first.
func laneFootprint(row ProfileRow) runreport.LaneFootprint {
	by := map[string]int64{}
	for _, r := range row.Written {
		by[cmp.Or(r.Region, "unlabelled")] += int64(r.Count)
	}
	lf := runreport.LaneFootprint{Lane: row.Lane, Errno: row.Errno, Sectors: int64(row.SectorsWritten)}
	for region, n := range by {
		lf.ByRegion = append(lf.ByRegion, runreport.RegionSectors{Region: region, Sectors: n})
	}
	slices.SortFunc(lf.ByRegion, func(a, b runreport.RegionSectors) int {
		if a.Sectors != b.Sectors {
			return cmp.Compare(b.Sectors, a.Sectors)
		}
		return strings.Compare(a.Region, b.Region)
	})
	return lf
}
