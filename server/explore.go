package server

import (
	"context"
	"fmt"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/guest/guestproto"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/runs/exploration/exploreproto"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/shards"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Explore implements themisv1.ThemisServer: it validates the request, runs
// the exploration in the domain and streams progress, findings (each the
// moment it is found, then its minimized update with the same id) and the
// summary. A cancelled stream cancels the run; what was found stays stored.
func (s *Server) Explore(req *themisv1.ExploreRequest, stream themisv1.Themis_ExploreServer) error {
	if req.GetMaxSeconds() < 0 {
		return toStatus(errkind.Invalid("max_seconds", "must not be negative, got %d", req.GetMaxSeconds()))
	}
	setup, err := opspec.ParseTrace(req.GetSetup())
	if err != nil {
		return toStatus(errkind.Invalid("setup", "%v", err))
	}
	opts := exploration.Options{
		Lanes:          req.GetLanes(),
		MemoryMiB:      int(req.GetMemoryMib()),
		Image:          req.GetImage(),
		Backend:        req.GetBackend(),
		Depth:          int(req.GetDepth()),
		Branching:      int(req.GetBranching()),
		Ops:            req.GetOps(),
		MaxStates:      int(req.GetMaxStates()),
		Seed:           req.GetSeed(),
		TimeMode:       req.GetTimeMode(),
		Policy:         req.GetPolicy(),
		MaxDuration:    time.Duration(req.GetMaxSeconds()) * time.Second,
		Fsck:           req.GetFsck(),
		Remount:        req.GetRemount(),
		LazyRestore:    req.GetLazyRestore(),
		Revert:         req.GetRevert(),
		Workers:        int(req.GetWorkers()),
		Walks:          int(req.GetWalks()),
		Setup:          setup,
		WarnNotFinding: req.GetWarnNotFinding(),
		Shard:          explore.Shard{Index: int(req.GetShardIndex()), Count: int(req.GetShardCount()), Depth: int(req.GetShardDepth())},
	}
	if req.GetCrash() {
		opts.Crash = &exploration.CrashOptions{Crash: crash.Options{MaxSubset: int(req.GetCrashWrites()), MaxStates: int(req.GetCrashMaxStates())}, Strict: req.GetCrashStrict()}
	}
	if err := exploration.Validate(opts); err != nil {
		return toStatus(err)
	}
	out, ctx := newRunStream(s, "explore", stream, func(m *themisv1.ExploreResponse) bool { return m.GetProgress() != nil })
	feed := s.startFeed("explore", req)
	defer feed.End()
	sum, err := s.d.Explore(ctx, opts, func(p exploration.Progress) {
		feed.Publish(p.Session, exploreUpdate(p))
		out.send(&themisv1.ExploreResponse{Event: &themisv1.ExploreResponse_Progress{Progress: exploreproto.Progress(p)}})
	}, func(f session.Finding) {
		out.send(&themisv1.ExploreResponse{Event: &themisv1.ExploreResponse_Finding{Finding: findingProto(&f)}})
	})
	if sum != nil { // the run's last word, also where it reported no progress (a short run)
		feed.Publish(sum.Session, exploreUpdate(exploration.Progress{States: sum.States, Unique: sum.Unique, Depth: sum.MaxDepth,
			Findings: sum.Findings, StatesPerSec: sum.StatesPerSec, Elapsed: sum.Elapsed}))
	}
	return out.end(err, func() *themisv1.ExploreResponse {
		return &themisv1.ExploreResponse{Event: &themisv1.ExploreResponse_Summary{Summary: exploreproto.Summary(sum)}}
	})
}

// ListFindings implements themisv1.ThemisServer.
func (s *Server) ListFindings(ctx context.Context, req *themisv1.ListFindingsRequest) (*themisv1.ListFindingsResponse, error) {
	size, key, err := pageParams(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	fs, err := s.d.FindingsPage(ctx, req.GetSessionId(), key, size+1) // one more: is there a next page?
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.ListFindingsResponse{}
	if len(fs) > size {
		fs = fs[:size]
		out.NextPageToken = encodePageToken(session.PageKey{Created: fs[size-1].Created, ID: fs[size-1].ID})
	}
	for i := range fs {
		out.Findings = append(out.Findings, findingProto(&fs[i]))
	}
	return out, nil
}

// GetFinding implements themisv1.ThemisServer.
func (s *Server) GetFinding(ctx context.Context, req *themisv1.GetFindingRequest) (*themisv1.GetFindingResponse, error) {
	if err := required("finding_id", req.GetFindingId()); err != nil {
		return nil, toStatus(err)
	}
	f, err := s.d.Finding(ctx, req.GetFindingId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.GetFindingResponse{Finding: findingProto(f)}, nil
}

// SetFindingStatus implements themisv1.ThemisServer.
func (s *Server) SetFindingStatus(ctx context.Context, req *themisv1.SetFindingStatusRequest) (*themisv1.SetFindingStatusResponse, error) {
	if err := session.ValidateFindingStatus(req.GetFindingId(), req.GetStatus()); err != nil {
		return nil, toStatus(err)
	}
	f, err := s.d.SetFindingStatus(ctx, req.GetFindingId(), req.GetStatus())
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.SetFindingStatusResponse{Finding: findingProto(f)}, nil
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// MergeExplore implements themisv1.ThemisServer: shards.Explore over the
// shards' results the client sent (no session; the request's size is
// bounded by MaxRequestBytes).
func (s *Server) MergeExplore(_ context.Context, req *themisv1.MergeExploreRequest) (*themisv1.MergeExploreResponse, error) {
	parts := req.GetShards()
	if len(parts) > shards.MaxShards {
		return nil, toStatus(errkind.Invalid("shards", "%d given, at most %d", len(parts), shards.MaxShards))
	}
	names := make([]string, len(parts))
	for i := range parts {
		names[i] = fmt.Sprintf("shards[%d]", i)
	}
	m, err := shards.Explore(names, parts)
	if err != nil {
		return nil, toStatus(err)
	}
	return m, nil
}

// GetExploreRun implements themisv1.ThemisServer.
func (s *Server) GetExploreRun(ctx context.Context, req *themisv1.GetExploreRunRequest) (*themisv1.GetExploreRunResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	r, err := s.d.ExploreRecord(ctx, req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.GetExploreRunResponse{Request: exploreproto.Request(&r.Options), Summary: exploreproto.Summary(&r.Summary)}
	for _, p := range r.Progress {
		out.Progress = append(out.Progress, exploreproto.Progress(p))
	}
	return out, nil
}

func findingProto(f *session.Finding) *themisv1.Finding {
	p := &themisv1.Finding{
		Id: f.ID, SessionId: f.Session, Kind: f.Kind, Detail: f.Detail, Trace: f.Trace,
		Lanes: laneResultsProto(f.Lanes), Path: f.Path, Field: f.Field, Seed: f.Seed, Minimized: f.Minimized,
		CreateTime: timestamppb.New(f.Created), LaneSpecs: f.LaneSpecs, FoundTrace: f.FoundTrace, DuplicateOf: f.DuplicateOf, Revert: f.Revert, Policy: f.Policy,
		Signature: f.Signature, TimesSeen: int32(f.Seen.Times), FirstId: f.Seen.FirstID, Crash: crashPointProto(f.Crash),
		Kernel: kernelReportProto(f.Kernel), Image: guestproto.Ref(f.Image),
	}
	if f.Seen.Times > 0 {
		p.FirstSeen, p.LastSeen = timestamppb.New(f.Seen.First), timestamppb.New(f.Seen.Last)
	}
	p.Status = f.Seen.Status
	if !f.Seen.StatusTime.IsZero() {
		p.StatusTime = timestamppb.New(f.Seen.StatusTime)
	}
	return p
}

// kernelReportProto is a kernel finding's report (nil for other findings).
func kernelReportProto(r *kreport.Report) *themisv1.KernelReport {
	if r == nil {
		return nil
	}
	return &themisv1.KernelReport{Kind: string(r.Kind), Title: r.Title, Rip: r.RIP, Trace: r.Trace, Panic: r.Panic, Text: r.Text}
}
