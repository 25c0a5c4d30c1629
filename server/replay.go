package server

import (
	"context"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest/guestproto"
	"github.com/themisfs/themis/runs/exploration"
)

// Replay implements themisv1.ThemisServer: it looks the finding up and
// replays it in a session of its own (exploration.Replay).
func (s *Server) Replay(ctx context.Context, req *themisv1.ReplayRequest) (*themisv1.ReplayResponse, error) {
	if err := required("finding_id", req.GetFindingId()); err != nil {
		return nil, toStatus(err)
	}
	f, err := s.d.Finding(ctx, req.GetFindingId())
	if err != nil {
		return nil, toStatus(err)
	}
	rep, err := s.d.Replay(ctx, f, exploration.ReplayOn{Image: req.GetImage(), Stock: req.GetStock()})
	if err != nil {
		return nil, toStatus(err)
	}
	return replayProto(rep), nil
}

// replayProto is a replay's result as the API's.
func replayProto(r *exploration.Replayed) *themisv1.ReplayResponse {
	out := &themisv1.ReplayResponse{FindingId: r.Finding, SessionId: r.Session, Kind: r.Kind, Revert: r.Revert, Image: r.Image,
		Booted: guestproto.Ref(r.Booted), Roots: r.Roots, ErrnoDiverged: r.ErrnoDiverged, StateDiverged: r.StateDiverged,
		Reference: r.Reference, NotReplayable: r.NotReplayable, Reproduced: r.Reproduced}
	for _, st := range r.Steps {
		out.Steps = append(out.Steps, &themisv1.ReplayStep{Op: st.Op, Errnos: st.ErrnoList(), Diverged: st.Diverged})
	}
	if k := r.Kernel; k != nil {
		out.CrashedAt, out.CrashedOp, out.Signature, out.WantSignature, out.Verdict = int32(k.CrashedAt), k.CrashedOp, k.Signature, k.Want, k.Verdict
		if k.Report != nil {
			out.Kernel = kernelReportProto(k.Report)
		}
	}
	return out
}

// Bisect implements themisv1.ThemisServer: the finding replayed on each
// image in order (exploration.Bisect).
func (s *Server) Bisect(ctx context.Context, req *themisv1.BisectRequest) (*themisv1.BisectResponse, error) {
	if err := required("finding_id", req.GetFindingId()); err != nil {
		return nil, toStatus(err)
	}
	f, err := s.d.Finding(ctx, req.GetFindingId())
	if err != nil {
		return nil, toStatus(err)
	}
	b, err := s.d.Bisect(ctx, f, req.GetImages())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.BisectResponse{FindingId: b.Finding, FirstDifferingImage: b.FirstDiffer}
	for _, r := range b.Rows {
		out.Rows = append(out.Rows, &themisv1.BisectRow{Image: r.Image, KernelVersion: r.Kernel, Reproduced: r.Reproduced, Detail: r.Detail, SessionId: r.Session})
	}
	return out, nil
}

// ReplayPasses implements themisv1.ThemisServer: a finding's trace, or
// lanes and a trace given, replayed passes times per clock mode
// (exploration.Passes); each pass's progress, then the result.
func (s *Server) ReplayPasses(req *themisv1.ReplayPassesRequest, stream themisv1.Themis_ReplayPassesServer) error {
	o := exploration.PassesOptions{Lanes: req.GetLanes(), Trace: req.GetTrace(), Image: req.GetImage(), N: int(req.GetPasses()),
		Clock: req.GetClock(), ICount: req.GetIcount()}
	switch {
	case req.GetFindingId() != "" && (len(o.Lanes) > 0 || len(o.Trace) > 0):
		return toStatus(errkind.Invalid("finding_id", "with lanes or a trace: give a finding, or lanes and a trace"))
	case req.GetFindingId() == "" && len(o.Lanes) == 0:
		return toStatus(errkind.Invalid("lanes", "required without finding_id"))
	case req.GetFindingId() != "":
		f, err := s.d.Finding(stream.Context(), req.GetFindingId())
		if err != nil {
			return toStatus(err)
		}
		if o = exploration.PassesFor(f, o); o.Image == "" {
			o.Image = exploration.FindingImage(f)
		}
	}
	out, ctx := newRunStream(s, "replay passes", stream, func(m *themisv1.ReplayPassesResponse) bool { return m.GetProgress() != nil })
	res, err := s.d.ReplayPasses(ctx, o, func(p exploration.PassProgress) {
		out.send(&themisv1.ReplayPassesResponse{Event: &themisv1.ReplayPassesResponse_Progress{Progress: &themisv1.PassProgress{
			Clock: p.Clock, Icount: p.ICount, Pass: int32(p.Pass), Passes: int32(p.Passes)}}})
	})
	return out.end(err, func() *themisv1.ReplayPassesResponse {
		return &themisv1.ReplayPassesResponse{Event: &themisv1.ReplayPassesResponse_Result{Result: passesProto(res)}}
	})
}

// passesProto is a fidelity measurement as the API's.
func passesProto(r *exploration.PassesResult) *themisv1.PassesResult {
	out := &themisv1.PassesResult{FindingId: r.Finding, SessionIds: r.Sessions, Backend: r.Backend, Trace: r.Trace}
	for _, row := range r.Rows {
		disks := make(map[string]int32, len(row.Disks))
		for lane, n := range row.Disks {
			disks[lane] = int32(n)
		}
		out.Rows = append(out.Rows, &themisv1.PassesRow{Clock: row.Clock, Icount: row.ICount, Passes: int32(row.Passes),
			DistinctDiskHashes: disks, DistinctRamHashes: int32(row.RAM)})
	}
	return out
}
