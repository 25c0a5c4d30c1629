package server

import (
	"context"

	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/runs/belowfs"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
)

// Profile implements themisv1.ThemisServer.
func (s *Server) Profile(req *themisv1.ProfileRequest, stream themisv1.Themis_ProfileServer) error {
	out, ctx := newRunStream[*themisv1.ProfileResponse](s, "profile", stream, nil)
	sum, err := s.d.Profile(ctx, belowfs.ProfileOptions{
		Lanes: req.GetLanes(), Ops: req.GetOps(), Setup: req.GetSetup(), SetupMayFail: req.GetSetupMayFail(), MemoryMiB: int(req.GetMemoryMib()), Image: req.GetImage(),
		LsFiles: int(req.GetLsFiles()), TreeEntries: int(req.GetTreeEntries()),
	}, func(r belowfs.ProfileRow) {
		out.send(&themisv1.ProfileResponse{Event: &themisv1.ProfileResponse_Row{Row: &themisv1.ProfileRow{
			Lane: r.Lane, Op: r.Op, Bytes: r.Bytes, SectorsWritten: int32(r.SectorsWritten), WrittenLbas: lbaRanges(r.Written),
			SectorsRead: int32(r.SectorsRead), MountBaselineRead: int32(r.MountBaselineRead), Amplification: r.Amplification, Errno: r.Errno,
			ReadLbas: lbaRanges(r.Read), Entries: r.Entries,
		}}})
	})
	return out.end(err, func() *themisv1.ProfileResponse {
		ps := &themisv1.ProfileSummary{SessionId: sum.Session, Rows: int32(sum.Rows), ElapsedS: sum.Elapsed.Seconds()}
		for _, lane := range sortedKeys(sum.Layout) {
			ps.Layouts = append(ps.Layouts, &themisv1.LaneLayout{Lane: lane, Parsed: lbaRanges(sum.Layout[lane]), Inferred: lbaRanges(sum.Inferred[lane])})
		}
		return &themisv1.ProfileResponse{Event: &themisv1.ProfileResponse_Summary{Summary: ps}}
	})
}

// Corrupt implements themisv1.ThemisServer.
func (s *Server) Corrupt(req *themisv1.CorruptRequest, stream themisv1.Themis_CorruptServer) error {
	out, ctx := newRunStream[*themisv1.CorruptResponse](s, "corrupt", stream, nil)
	sum, err := s.d.Corrupt(ctx, belowfs.CorruptOptions{
		Lanes: req.GetLanes(), Targets: req.GetTargets(), Setup: req.GetSetup(), Sweep: req.GetSweep(), MemoryMiB: int(req.GetMemoryMib()), Image: req.GetImage(),
	}, func(r belowfs.CorruptResult) {
		out.send(&themisv1.CorruptResponse{Event: &themisv1.CorruptResponse_Result{Result: corruptResultProto(r)}})
	})
	return out.end(err, func() *themisv1.CorruptResponse {
		return &themisv1.CorruptResponse{Event: &themisv1.CorruptResponse_Summary{Summary: corruptSummaryProto(sum)}}
	})
}

func corruptResultProto(r belowfs.CorruptResult) *themisv1.CorruptResult {
	return &themisv1.CorruptResult{
		Lane: r.Lane, Target: r.Target, Lba: r.LBA, Offset: int32(r.Offset), Bit: int32(r.Bit), Region: r.Region, Field: r.Field,
		Mounted: r.Mounted, MountError: r.MountError, KernelLog: r.KernelLog, Affected: r.Affected, ReadErrno: r.ReadErrno,
		FsckClean: r.FsckClean, FsckSummary: r.FsckSummary, FsckTool: r.FsckTool, Class: r.Class, Kernel: kernelReportProto(r.Kernel),
	}
}

func corruptSummaryProto(sum *belowfs.CorruptSummary) *themisv1.CorruptSummary {
	cs := &themisv1.CorruptSummary{SessionId: sum.Session, Results: int32(sum.Results), ByClass: map[string]int64{}, ElapsedS: sum.Elapsed.Seconds(),
		Sessions: sum.Sessions, Deaths: int32(sum.Deaths)}
	for k, v := range sum.ByClass {
		cs.ByClass[k] = int64(v)
	}
	return cs
}

func lbaRanges(in []belowfs.LBARange) []*themisv1.LBARange {
	out := make([]*themisv1.LBARange, 0, len(in))
	for _, r := range in {
		out = append(out, &themisv1.LBARange{First: r.First, Count: r.Count, Region: r.Region, Path: r.Path})
	}
	return out
}

// Diff implements themisv1.ThemisServer.
func (s *Server) Diff(ctx context.Context, req *themisv1.DiffRequest) (*themisv1.DiffResponse, error) {
	for _, f := range []struct{ name, v string }{{"session_id", req.GetSessionId()}, {"lane", req.GetLane()}, {"from", req.GetFrom()}, {"to", req.GetTo()}} {
		if err := required(f.name, f.v); err != nil {
			return nil, toStatus(err)
		}
	}
	d, err := s.d.Diff(ctx,
		session.DiffSide{Session: req.GetSessionId(), Lane: req.GetLane(), At: req.GetFrom()},
		session.DiffSide{Session: req.GetSessionB(), Lane: req.GetLaneB(), At: req.GetTo()},
		req.GetNormalize())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.DiffResponse{RawSectors: int64(d.RawSectors), NormalizedSectors: int64(d.NormalizedSectors), Normalized: d.Normalized}
	conv := func(rs []fsimage.DiffRange) []*themisv1.DiffRange {
		o := make([]*themisv1.DiffRange, 0, len(rs))
		for _, r := range rs {
			o = append(o, &themisv1.DiffRange{Offset: r.Offset, Len: int32(r.Len), Region: r.Region, Group: int32(r.Group), Field: r.Field})
		}
		return o
	}
	out.Ranges, out.Masked = conv(d.Ranges), conv(d.Masked)
	return out, nil
}

// Footprint implements themisv1.ThemisServer: a finding's last op
// profiled below the filesystem (belowfs.FootprintOf).
func (s *Server) Footprint(ctx context.Context, req *themisv1.FootprintRequest) (*themisv1.FootprintResponse, error) {
	if err := required("finding_id", req.GetFindingId()); err != nil {
		return nil, toStatus(err)
	}
	if req.GetMemoryMib() < 0 {
		return nil, toStatus(errkind.Invalid("memory_mib", "must not be negative, got %d", req.GetMemoryMib()))
	}
	f, err := s.d.Finding(ctx, req.GetFindingId())
	if err != nil {
		return nil, toStatus(err)
	}
	fp, err := s.d.Footprint(ctx, f, req.GetLanes(), int(req.GetMemoryMib()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.FootprintResponse{FindingId: fp.Finding, Note: fp.Note}
	for _, l := range fp.Lanes {
		pl := &themisv1.LaneFootprint{Lane: l.Lane, Errno: l.Errno, Sectors: l.Sectors}
		for _, r := range l.ByRegion {
			pl.ByRegion = append(pl.ByRegion, &themisv1.RegionSectors{Region: r.Region, Sectors: r.Sectors})
		}
		out.Lanes = append(out.Lanes, pl)
	}
	return out, nil
}
