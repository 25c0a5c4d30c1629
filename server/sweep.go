package server

import (
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/clock"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/runs/clocksweep"
)

// ClockSweep implements themisv1.ThemisServer: it decodes the plan (strict
// JSON), runs the sweep in the domain and streams one message per cell, then
// the summary.
func (s *Server) ClockSweep(req *themisv1.ClockSweepRequest, stream themisv1.Themis_ClockSweepServer) error {
	if len(req.GetLanes()) == 0 {
		return toStatus(errkind.Invalid("lanes", "at least one lane spec is required"))
	}
	opts := clocksweep.Options{
		Lanes: req.GetLanes(), Ops: req.GetOps(),
		Shard: int(req.GetShard()), Shards: int(req.GetShards()), MemoryMiB: int(req.GetMemoryMib()),
		Backend: req.GetBackend(), Image: req.GetImage(),
	}
	if len(req.GetPlanJson()) > 0 {
		if len(req.GetPlanJson()) > 1<<20 {
			return toStatus(errkind.Invalid("plan_json", "larger than 1 MiB"))
		}
		p, err := clock.DecodePlan(req.GetPlanJson(), clock.FormatJSON)
		if err != nil {
			return toStatus(errkind.Invalid("plan_json", "%v", err))
		}
		opts.Plan = p
	}
	out, ctx := newRunStream[*themisv1.ClockSweepResponse](s, "clock sweep", stream, nil)
	sum, err := s.d.ClockSweep(ctx, opts, func(c clocksweep.Cell) {
		out.send(&themisv1.ClockSweepResponse{Event: &themisv1.ClockSweepResponse_Cell{Cell: sweepCellProto(c)}})
	})
	return out.end(err, func() *themisv1.ClockSweepResponse {
		return &themisv1.ClockSweepResponse{Event: &themisv1.ClockSweepResponse_Summary{Summary: sweepSummaryProto(sum)}}
	})
}

func sweepSummaryProto(sum *clocksweep.Summary) *themisv1.SweepSummary {
	out := &themisv1.SweepSummary{
		SessionId: sum.Session, Cells: int64(sum.Cells), ByVerdict: map[string]int64{},
		ElapsedS: sum.Elapsed.Seconds(), BootS: sum.Boot.Seconds(), CellsPerSec: sum.CellsPerSec,
		Sessions: sum.Sessions, Deaths: int32(sum.Deaths),
	}
	for k, v := range sum.ByVerdict {
		out.ByVerdict[k] = int64(v)
	}
	for _, c := range sum.Contrast {
		out.Contrast = append(out.Contrast, &themisv1.SweepContrast{
			Lane: c.Lane, Value: c.Value, Reference: c.Reference, Stored: c.Stored, Clamped: c.Clamped,
			TimeExcludedEqual: c.TimeExcludedEqual, TimeIncludedEqual: c.TimeIncludedEqual, FirstDiff: c.FirstDiff,
		})
	}
	return out
}

func timespecProto(t clock.Timespec) *agentv1.Timespec {
	return &agentv1.Timespec{Sec: t.Sec, Nsec: t.Nsec}
}

func sweepCellProto(c clocksweep.Cell) *themisv1.SweepCell {
	out := &themisv1.SweepCell{
		Lane: c.Lane, Fs: c.FS, InodeSize: int32(c.InodeSize), Name: c.Name, Kind: string(c.Kind),
		Value: c.Value, ValueNs: c.ValueNs, Op: c.Op, Field: string(c.Field),
		Guest: timespecProto(c.Guest), AfterRemount: timespecProto(c.AfterRemount),
		Errno: c.Errno, Verdict: c.Verdict, ClampedTo: c.ClampedTo, Expected: c.Expected,
		Touches: int32(c.Touches), DistinctGuest: int32(c.DistinctGuest), DistinctOnDisk: int32(c.DistinctOnDisk),
		Kernel: kernelReportProto(c.Kernel),
	}
	if c.OnDisk != nil {
		out.OnDisk = timespecProto(*c.OnDisk)
	}
	return out
}
