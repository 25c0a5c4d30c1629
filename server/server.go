package server

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/themisfs/themis/api"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/live"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// Request limits the edge enforces (the API documents them).
const (
	// DefaultReadLength is ReadFile's length when the request leaves it 0.
	DefaultReadLength = 64 << 10
	// MaxReadLength is the largest ReadFile length, in bytes.
	MaxReadLength = 1 << 20
	// DefaultEventLimit is ListEvents' limit when the request leaves it 0.
	DefaultEventLimit = api.DefaultEventLimit
	// MaxEventLimit caps ListEvents' limit; larger requests are clamped.
	MaxEventLimit = api.MaxEventLimit
	// DefaultStreamBuffer is how many messages (findings, cells, rows;
	// progress is coalesced) a run may queue ahead of a client that does
	// not read its stream.
	DefaultStreamBuffer = 256
	// MaxStreamBuffer caps limits.stream_buffer: 4096 image chunks of 128
	// KiB are 512 MiB held for one client.
	MaxStreamBuffer = 4096
	// DefaultStreamWait is how long a run waits for room in a full stream
	// buffer before it is cancelled (ResourceExhausted: client not reading).
	DefaultStreamWait = 30 * time.Second
)

// Server implements themisv1.ThemisServer over a Domain.
type Server struct {
	themisv1.UnimplementedThemisServer

	d      Domain
	log    *zap.Logger
	health *health.Server
	// metrics is set by the Daemon; nil counts nothing.
	metrics *metrics
	// streamBuffer and streamWait bound a run's stream (runStream):
	// messages queued, and how long a run waits for room.
	streamBuffer int
	streamWait   time.Duration
	// live takes the runs' progress for the dashboard; nil keeps none.
	live *live.Hub
}

var _ themisv1.ThemisServer = (*Server)(nil)

// New returns the adapters over d. A nil log discards.
func New(d Domain, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{d: d, log: log.Named("server"), health: health.NewServer(),
		streamBuffer: DefaultStreamBuffer, streamWait: DefaultStreamWait}
}

// Register registers srv on s together with grpc health (SERVING for the
// server as a whole and for themis.v1.Themis) and server reflection, so
// grpcurl works without proto files.
func Register(s *grpc.Server, srv *Server) {
	themisv1.RegisterThemisServer(s, srv)
	srv.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	srv.health.SetServingStatus(themisv1.Themis_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, srv.health)
	reflection.Register(s)
}

// required returns a FieldError when v is empty.
func required(field, v string) error {
	if v == "" {
		return errkind.Invalid(field, "required")
	}
	return nil
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// CreateSession implements themisv1.ThemisServer.
func (s *Server) CreateSession(ctx context.Context, req *themisv1.CreateSessionRequest) (*themisv1.CreateSessionResponse, error) {
	o := session.CreateOptions{
		Lanes:     req.GetLanes(),
		MemoryMiB: int(req.GetMemoryMib()),
		Restore:   vmm.RestoreMode(req.GetRestoreMode()),
		Verify:    req.GetVerify(),
		Backend:   req.GetBackend(),
		Image:     req.GetImage(),
		ICount:    req.GetIcount(),
	}
	// Every field to its grammar here, whatever the domain does: a lane's
	// name and spec reach exported reproducers' shell and C.
	probe := o // ValidateCreate fills defaults; the domain fills its own
	if _, err := session.ValidateCreate(&probe); err != nil {
		return nil, toStatus(err)
	}
	info, err := s.d.Create(ctx, o)
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.CreateSessionResponse{Session: sessionProto(info)}, nil
}

// GetSession implements themisv1.ThemisServer.
func (s *Server) GetSession(ctx context.Context, req *themisv1.GetSessionRequest) (*themisv1.GetSessionResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	info, err := s.d.Get(ctx, req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.GetSessionResponse{Session: sessionProto(info)}, nil
}

// ListSessions implements themisv1.ThemisServer.
// The domain cuts the page (the ledger's in SQL; running sessions are in
// memory).
func (s *Server) ListSessions(ctx context.Context, req *themisv1.ListSessionsRequest) (*themisv1.ListSessionsResponse, error) {
	size, key, err := pageParams(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	page, err := s.d.ListPage(ctx, req.GetAll(), key, size+1) // one more: is there a next page?
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.ListSessionsResponse{}
	if len(page) > size {
		page = page[:size]
		out.NextPageToken = encodePageToken(session.PageKey{Created: page[size-1].Created, ID: page[size-1].ID})
	}
	out.Sessions = make([]*themisv1.Session, 0, len(page))
	for _, in := range page {
		out.Sessions = append(out.Sessions, sessionProto(in))
	}
	return out, nil
}

// DeleteSession implements themisv1.ThemisServer.
func (s *Server) DeleteSession(ctx context.Context, req *themisv1.DeleteSessionRequest) (*themisv1.DeleteSessionResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.d.Delete(ctx, req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.DeleteSessionResponse{}, nil
}

// Fork implements themisv1.ThemisServer.
func (s *Server) Fork(ctx context.Context, req *themisv1.ForkRequest) (*themisv1.ForkResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	origin, err := originDomain("origin", req.GetOrigin())
	if err != nil {
		return nil, toStatus(err)
	}
	c, err := s.d.Fork(ctx, req.GetSessionId(), req.GetName(), origin)
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.ForkResponse{Checkpoint: checkpointProto(c)}, nil
}

// Restore implements themisv1.ThemisServer.
func (s *Server) Restore(ctx context.Context, req *themisv1.RestoreRequest) (*themisv1.RestoreResponse, error) {
	if err := firstErr(required("session_id", req.GetSessionId()), required("checkpoint", req.GetCheckpoint())); err != nil {
		return nil, toStatus(err)
	}
	c, d, err := s.d.Restore(ctx, req.GetSessionId(), req.GetCheckpoint())
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.RestoreResponse{Checkpoint: checkpointProto(c), DurationUs: d.Microseconds()}, nil
}

// ListCheckpoints implements themisv1.ThemisServer.
func (s *Server) ListCheckpoints(ctx context.Context, req *themisv1.ListCheckpointsRequest) (*themisv1.ListCheckpointsResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	cs, err := s.d.Checkpoints(ctx, req.GetSessionId(), req.GetAll())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.ListCheckpointsResponse{Checkpoints: make([]*themisv1.Checkpoint, 0, len(cs))}
	for _, c := range cs {
		out.Checkpoints = append(out.Checkpoints, checkpointProto(c))
	}
	return out, nil
}

// DeleteCheckpoint implements themisv1.ThemisServer.
func (s *Server) DeleteCheckpoint(ctx context.Context, req *themisv1.DeleteCheckpointRequest) (*themisv1.DeleteCheckpointResponse, error) {
	if err := firstErr(required("session_id", req.GetSessionId()), required("checkpoint", req.GetCheckpoint())); err != nil {
		return nil, toStatus(err)
	}
	if err := s.d.DeleteCheckpoint(ctx, req.GetSessionId(), req.GetCheckpoint()); err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.DeleteCheckpointResponse{}, nil
}

// Apply implements themisv1.ThemisServer.
func (s *Server) Apply(ctx context.Context, req *themisv1.ApplyRequest) (*themisv1.ApplyResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	op, err := opRequest("op", req.GetOp())
	if err != nil {
		return nil, toStatus(err)
	}
	rs, err := s.d.Apply(ctx, req.GetSessionId(), op)
	if err != nil {
		return nil, toStatus(err)
	}
	s.metrics.op(opName(req.GetOp()))
	return &themisv1.ApplyResponse{Results: laneResultsProto(rs), Diverged: diverged(rs)}, nil
}

// Fingerprint implements themisv1.ThemisServer.
func (s *Server) Fingerprint(ctx context.Context, req *themisv1.FingerprintRequest) (*themisv1.FingerprintResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	if _, ok := agentv1.TimeMode_name[int32(req.GetTimeMode())]; !ok {
		return nil, toStatus(errkind.Invalid("time_mode", "unknown time mode %d", int32(req.GetTimeMode())))
	}
	for i, l := range req.GetLanes() {
		if err := required(fmt.Sprintf("lanes[%d]", i), l); err != nil {
			return nil, toStatus(err)
		}
	}
	fps, err := s.d.Fingerprint(ctx, req.GetSessionId(), req.GetTimeMode(), req.GetLeaves(), req.GetLanes())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.FingerprintResponse{Lanes: make([]*themisv1.LaneFingerprint, 0, len(fps))}
	for _, fp := range fps {
		out.Lanes = append(out.Lanes, &themisv1.LaneFingerprint{Lane: fp.Lane, Root: fp.Root, Entries: fp.Entries, Leaves: fp.Leaves,
			BelowRoot: fp.BelowRoot, BelowEntries: fp.BelowEntries, BelowLeaves: fp.BelowLeaves})
	}
	if !req.GetHashes() {
		return out, nil
	}
	h, err := s.d.Hashes(ctx, req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	for _, fp := range fps {
		sum := h.Disks[fp.Lane]
		out.DiskHashes = append(out.DiskHashes, &themisv1.LaneRoot{Lane: fp.Lane, Root: sum[:]})
	}
	if h.HasRAM {
		out.RamHash = h.RAM[:]
	}
	return out, nil
}

// Stat implements themisv1.ThemisServer.
func (s *Server) Stat(ctx context.Context, req *themisv1.StatRequest) (*themisv1.StatResponse, error) {
	if err := firstErr(required("session_id", req.GetSessionId()), required("lane", req.GetLane())); err != nil {
		return nil, toStatus(err)
	}
	st, r, err := s.d.Stat(ctx, req.GetSessionId(), req.GetLane(), req.GetPath(), req.GetFollow())
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.StatResponse{Errno: r.Errno, Error: r.Error, Stat: st}, nil
}

// ReadFile implements themisv1.ThemisServer.
func (s *Server) ReadFile(ctx context.Context, req *themisv1.ReadFileRequest) (*themisv1.ReadFileResponse, error) {
	if err := firstErr(required("session_id", req.GetSessionId()), required("lane", req.GetLane())); err != nil {
		return nil, toStatus(err)
	}
	if req.GetOffset() < 0 {
		return nil, toStatus(errkind.Invalid("offset", "must not be negative, got %d", req.GetOffset()))
	}
	length := req.GetLength()
	switch {
	case length < 0:
		return nil, toStatus(errkind.Invalid("length", "must not be negative, got %d", length))
	case length == 0:
		length = DefaultReadLength
	case length > MaxReadLength:
		return nil, toStatus(errkind.Invalid("length", "at most %d bytes, got %d", MaxReadLength, length))
	}
	data, eof, r, err := s.d.ReadFile(ctx, req.GetSessionId(), req.GetLane(), req.GetPath(), req.GetOffset(), length)
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.ReadFileResponse{Errno: r.Errno, Error: r.Error, Data: data, Eof: eof}, nil
}

// RestoreFile implements themisv1.ThemisServer.
func (s *Server) RestoreFile(ctx context.Context, req *themisv1.RestoreFileRequest) (*themisv1.RestoreFileResponse, error) {
	if err := firstErr(
		required("session_id", req.GetSessionId()),
		required("checkpoint", req.GetCheckpoint()),
		required("lane", req.GetLane()),
		required("path", req.GetPath()),
	); err != nil {
		return nil, toStatus(err)
	}
	removed, size, err := s.d.RestoreFile(ctx, req.GetSessionId(), req.GetCheckpoint(), req.GetLane(), req.GetPath())
	if err != nil {
		return nil, toStatus(err)
	}
	return &themisv1.RestoreFileResponse{Removed: removed, Size: size}, nil
}

// ListEvents implements themisv1.ThemisServer.
func (s *Server) ListEvents(ctx context.Context, req *themisv1.ListEventsRequest) (*themisv1.ListEventsResponse, error) {
	if err := required("session_id", req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	if req.GetAfterSeq() < 0 {
		return nil, toStatus(errkind.Invalid("after_seq", "must not be negative, got %d", req.GetAfterSeq()))
	}
	limit := int(req.GetLimit())
	switch {
	case limit < 0:
		return nil, toStatus(errkind.Invalid("limit", "must not be negative, got %d", limit))
	case limit == 0:
		limit = DefaultEventLimit
	case limit > MaxEventLimit:
		limit = MaxEventLimit
	}
	evs, err := s.d.Events(ctx, req.GetSessionId(), req.GetAfterSeq(), limit)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &themisv1.ListEventsResponse{Events: make([]*themisv1.Event, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, eventProto(e))
	}
	return out, nil
}
