package server

import (
	"context"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
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
		Booted: guestImageProto(r.Booted), Roots: r.Roots, ErrnoDiverged: r.ErrnoDiverged, StateDiverged: r.StateDiverged,
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
