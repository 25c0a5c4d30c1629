package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// serve starts the adapters over f on an in-memory listener and returns a
// connection to them.
func serve(t *testing.T, f *fakeDomain) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	Register(s, New(f, zaptest.NewLogger(t)))
	go func() { _ = s.Serve(lis) }() // returns nil after Stop
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := conn.Close(); err != nil {
			t.Error(err)
		}
		s.Stop()
	})
	return conn
}

func TestToStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err   error
		code  codes.Code
		msg   string
		field string
	}{
		{fmt.Errorf("create: %w", errkind.Invalid("lanes[1]", "unknown filesystem %q", "zfs")), codes.InvalidArgument, `create: lanes[1]: unknown filesystem "zfs"`, "lanes[1]"},
		{fmt.Errorf("plain: %w", errkind.ErrInvalid), codes.InvalidArgument, "plain: invalid argument", ""},
		{fmt.Errorf("session s-9: %w", errkind.ErrNotFound), codes.NotFound, "session s-9: not found", ""},
		{fmt.Errorf("session s-1 is ended: %w", errkind.ErrState), codes.FailedPrecondition, "session s-1 is ended: wrong state", ""},
		{fmt.Errorf("12 manual checkpoints: %w", errkind.ErrExhausted), codes.ResourceExhausted, "12 manual checkpoints: resource exhausted", ""},
		{fmt.Errorf("fsck image: %w", scratch.ErrNoRoom), codes.ResourceExhausted, "fsck image: no room for the image copy", ""},
		{fmt.Errorf("apply: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "apply: context deadline exceeded", ""},
		{fmt.Errorf("apply: %w", context.Canceled), codes.Canceled, "apply: context canceled", ""},
		{errors.New("qemu exited: signal 9"), codes.Internal, "qemu exited: signal 9", ""},
		{fmt.Errorf("explore: send: %w", status.Error(codes.Unavailable, "transport is closing")), codes.Unavailable, "explore: send: rpc error: code = Unavailable desc = transport is closing", ""},
	}
	for _, tt := range tests {
		st := status.Convert(toStatus(tt.err))
		if st.Code() != tt.code || st.Message() != tt.msg {
			t.Errorf("toStatus(%v) = %v %q, want %v %q", tt.err, st.Code(), st.Message(), tt.code, tt.msg)
		}
		if got := badField(st); got != tt.field {
			t.Errorf("toStatus(%v) field violation = %q, want %q", tt.err, got, tt.field)
		}
	}
	if err := toStatus(nil); err != nil {
		t.Errorf("toStatus(nil) = %v", err)
	}
}

// badField is the field named in a status's BadRequest detail.
func badField(st *status.Status) string {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

func TestConversions(t *testing.T) {
	t.Parallel()
	f := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, f))
	ctx := t.Context()
	ts0, ts1 := timestamppb.New(t0), timestamppb.New(t1)
	wantSession := func(id string) *themisv1.Session {
		return &themisv1.Session{
			Id: id, State: themisv1.Session_STATE_RUNNING,
			Lanes: []*themisv1.Lane{
				{Name: "ext2", Spec: "ext2", Fs: "ext2"},
				{Name: "b", Spec: "ext4:inode_size=128,name=b", Fs: "ext4"},
			},
			Backend: "qemu", MemoryMib: 256, RestoreMode: "full", Verify: true,
			CreateTime: ts0, Depth: 2,
		}
	}
	wantCheckpoint := func(id, name string, origin themisv1.Checkpoint_Origin) *themisv1.Checkpoint {
		return &themisv1.Checkpoint{
			Id: id, SessionId: "s-1", ParentId: "c-0", Name: name, Origin: origin, Slot: 3,
			CreateTime:   ts0,
			Roots:        []*themisv1.LaneRoot{{Lane: "a", Root: []byte{1}}, {Lane: "b", Root: []byte{2}}},
			OverlayDepth: 4, Live: true,
		}
	}
	check := func(name string, got, want proto.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
		}
	}

	cr, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2", "ext4"}, MemoryMib: 256, RestoreMode: "full", Verify: true, Backend: "qemu"})
	check("CreateSession", cr, &themisv1.CreateSessionResponse{Session: wantSession("s-1")}, err)
	wantOpts := session.CreateOptions{Lanes: []string{"ext2", "ext4"}, MemoryMiB: 256, Restore: vmm.RestoreFull, Verify: true, Backend: "qemu"}
	if diff := cmp.Diff(wantOpts, f.create); diff != "" {
		t.Errorf("CreateOptions mismatch (-want +got):\n%s", diff)
	}

	gr, err := c.GetSession(ctx, &themisv1.GetSessionRequest{SessionId: "s-7"})
	check("GetSession", gr, &themisv1.GetSessionResponse{Session: wantSession("s-7")}, err)

	ended := wantSession("s-0")
	ended.State, ended.EndTime, ended.Reason = themisv1.Session_STATE_FAILED, ts1, "guest died"
	lr, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{All: true})
	check("ListSessions", lr, &themisv1.ListSessionsResponse{Sessions: []*themisv1.Session{wantSession("s-1"), ended}}, err)

	fr, err := c.Fork(ctx, &themisv1.ForkRequest{SessionId: "s-1", Name: "n"})
	check("Fork", fr, &themisv1.ForkResponse{Checkpoint: wantCheckpoint("c-1", "n", themisv1.Checkpoint_ORIGIN_MANUAL)}, err)
	fr, err = c.Fork(ctx, &themisv1.ForkRequest{SessionId: "s-1", Origin: themisv1.Checkpoint_ORIGIN_AUTO})
	check("Fork auto", fr, &themisv1.ForkResponse{Checkpoint: wantCheckpoint("c-1", "", themisv1.Checkpoint_ORIGIN_AUTO)}, err)

	rr, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: "s-1", Checkpoint: "c-5"})
	check("Restore", rr, &themisv1.RestoreResponse{Checkpoint: wantCheckpoint("c-5", "before", themisv1.Checkpoint_ORIGIN_AUTO), DurationUs: 1500}, err)

	lc, err := c.ListCheckpoints(ctx, &themisv1.ListCheckpointsRequest{SessionId: "s-1"})
	check("ListCheckpoints", lc, &themisv1.ListCheckpointsResponse{Checkpoints: []*themisv1.Checkpoint{
		wantCheckpoint("c-1", "before", themisv1.Checkpoint_ORIGIN_AUTO), wantCheckpoint("c-2", "before", themisv1.Checkpoint_ORIGIN_AUTO)}}, err)

	dc, err := c.DeleteCheckpoint(ctx, &themisv1.DeleteCheckpointRequest{SessionId: "s-1", Checkpoint: "c-1"})
	check("DeleteCheckpoint", dc, &themisv1.DeleteCheckpointResponse{}, err)

	write := &agentv1.Write{Path: "d/f", Offset: 4096, Size: 10, Fill: 0x61}
	ar, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: "s-1", Op: &themisv1.Op{Op: &themisv1.Op_Write{Write: write}}})
	check("Apply", ar, &themisv1.ApplyResponse{Results: []*themisv1.LaneResult{{Lane: "a", Ret: 1}, {Lane: "b", Ret: 1}}}, err)
	check("Apply op", f.op, &agentv1.Request{Op: &agentv1.Request_Write{Write: write}}, nil)

	f.mu.Lock()
	f.results = []session.LaneResult{{Lane: "a"}, {Lane: "b", Errno: 17, Error: "mkdir d: file exists"}}
	f.mu.Unlock()
	ar, err = c.Apply(ctx, &themisv1.ApplyRequest{SessionId: "s-1", Op: &themisv1.Op{Op: &themisv1.Op_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d", Mode: 0o755}}}})
	check("Apply diverged", ar, &themisv1.ApplyResponse{
		Results:  []*themisv1.LaneResult{{Lane: "a"}, {Lane: "b", Errno: 17, Error: "mkdir d: file exists"}},
		Diverged: true,
	}, err)

	fp, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: "s-1", TimeMode: agentv1.TimeMode_TIME_MODE_ALL, Leaves: true})
	check("Fingerprint", fp, &themisv1.FingerprintResponse{Lanes: []*themisv1.LaneFingerprint{{
		Lane: "a", Root: []byte{0xab}, Entries: 2, Leaves: []*agentv1.Entry{{Path: ""}, {Path: "f", Size: 3}},
	}}}, err)
	fp, err = c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: "s-1", Hashes: true})
	disk := [32]byte{0xd1}
	ram := [32]byte{0xaa}
	check("Fingerprint with hashes", fp, &themisv1.FingerprintResponse{Lanes: []*themisv1.LaneFingerprint{{Lane: "a", Root: []byte{0xab}, Entries: 2}},
		DiskHashes: []*themisv1.LaneRoot{{Lane: "a", Root: disk[:]}}, RamHash: ram[:]}, err)

	sr, err := c.Stat(ctx, &themisv1.StatRequest{SessionId: "s-1", Lane: "a", Path: "f"})
	check("Stat", sr, &themisv1.StatResponse{Stat: &agentv1.StatResult{Kind: agentv1.Kind_KIND_REGULAR, Size: 3}}, err)
	sr, err = c.Stat(ctx, &themisv1.StatRequest{SessionId: "s-1", Lane: "a", Path: "missing"})
	check("Stat missing", sr, &themisv1.StatResponse{Errno: 2, Error: "lstat missing: no such file or directory"}, err)

	rf, err := c.ReadFile(ctx, &themisv1.ReadFileRequest{SessionId: "s-1", Lane: "a", Path: "f", Offset: 1})
	check("ReadFile", rf, &themisv1.ReadFileResponse{Data: []byte("abc"), Eof: true}, err)
	if want := [2]int64{1, DefaultReadLength}; f.read != want {
		t.Errorf("ReadFile offset, length = %v, want %v", f.read, want)
	}

	rs, err := c.RestoreFile(ctx, &themisv1.RestoreFileRequest{SessionId: "s-1", Checkpoint: "c-1", Lane: "a", Path: "f"})
	check("RestoreFile", rs, &themisv1.RestoreFileResponse{Removed: true}, err)

	ev, err := c.ListEvents(ctx, &themisv1.ListEventsRequest{SessionId: "s-1", AfterSeq: 10})
	check("ListEvents", ev, &themisv1.ListEventsResponse{Events: []*themisv1.Event{
		{Seq: 11, SessionId: "s-1", Time: ts0, Kind: "op", Detail: "mkdir d on 2 lanes",
			Results: []*themisv1.LaneResult{{Lane: "a"}, {Lane: "b", Errno: 17, Error: "exists"}}},
		{Seq: 12, SessionId: "s-1", Time: ts1, Kind: "fork", CheckpointId: "c-1"},
	}}, err)
	if f.limit != DefaultEventLimit {
		t.Errorf("ListEvents default limit = %d, want %d", f.limit, DefaultEventLimit)
	}
	if _, err := c.ListEvents(ctx, &themisv1.ListEventsRequest{SessionId: "s-1", Limit: 5000}); err != nil {
		t.Fatal(err)
	}
	if f.limit != MaxEventLimit {
		t.Errorf("ListEvents limit 5000 = %d, want clamped to %d", f.limit, MaxEventLimit)
	}

	if _, err := c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{SessionId: "s-1"}); err != nil {
		t.Fatal(err)
	}
}

// TestOpRequestEveryOp checks that every member of the Op oneof becomes the
// agent request carrying the same message, so a member added to the proto
// without a case here fails.
func TestOpRequestEveryOp(t *testing.T) {
	t.Parallel()
	od := (&themisv1.Op{}).ProtoReflect().Descriptor().Oneofs().ByName("op")
	reqOneof := (&agentv1.Request{}).ProtoReflect().Descriptor().Oneofs().ByName("op")
	fields := od.Fields()
	if fields.Len() != 20 {
		t.Errorf("Op has %d members; update this test and opRequest", fields.Len())
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		t.Run(string(fd.Name()), func(t *testing.T) {
			op := &themisv1.Op{}
			inner := op.ProtoReflect().NewField(fd).Message()
			if lane := inner.Descriptor().Fields().ByName("path"); lane != nil {
				inner.Set(lane, protoreflect.ValueOfString("d/f"))
			}
			op.ProtoReflect().Set(fd, protoreflect.ValueOfMessage(inner))
			req, err := opRequest("op", op)
			if err != nil {
				t.Fatal(err)
			}
			got := req.ProtoReflect().WhichOneof(reqOneof)
			if got == nil || got.Name() != fd.Name() {
				t.Fatalf("request op = %v, want %s", got, fd.Name())
			}
			if !proto.Equal(req.ProtoReflect().Get(got).Message().Interface(), inner.Interface()) {
				t.Errorf("request %s = %v, want %v", fd.Name(), req, inner)
			}
			if name := opName(op); name != string(fd.Name()) {
				t.Errorf("opName = %q, want %q", name, fd.Name())
			}
		})
	}
	// A member set without a message is the empty message, as on the wire.
	req, err := opRequest("op", &themisv1.Op{Op: &themisv1.Op_Sync{}})
	if err != nil || req.GetSync() == nil {
		t.Errorf("opRequest(sync without message) = %v, %v; want an empty Sync", req, err)
	}
}

// badInputs are requests the edge refuses, with the field it must name.
// The daemon tests reuse them over a real socket.
var badInputs = []struct {
	name  string
	call  func(context.Context, themisv1.ThemisClient) error
	field string
}{
	{"create no lanes", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{})
		return err
	}, "lanes"},
	{"create empty lane", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2", ""}})
		return err
	}, "lanes[1]"},
	{"create lane name with a command substitution", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2", "ext4:name=x$(id)"}})
		return err
	}, "lanes[1]"},
	{"create lane spec with a command substitution", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"x$(id)"}})
		return err
	}, "lanes[0]"},
	{"create lane name with a newline", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2:name=a\ntouch /tmp/x"}})
		return err
	}, "lanes[0]"},
	{"create lane option with a newline", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2:size=8\n:name=b"}})
		return err
	}, "lanes[0]"},
	{"create negative memory", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2"}, MemoryMib: -1})
		return err
	}, "memory_mib"},
	{"create bad restore mode", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2"}, RestoreMode: "half"})
		return err
	}, "restore_mode"},
	{"get no id", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.GetSession(ctx, &themisv1.GetSessionRequest{})
		return err
	}, "session_id"},
	{"delete no id", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{})
		return err
	}, "session_id"},
	{"fork no id", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Fork(ctx, &themisv1.ForkRequest{})
		return err
	}, "session_id"},
	{"fork bad origin", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Fork(ctx, &themisv1.ForkRequest{SessionId: "s-1", Origin: 7})
		return err
	}, "origin"},
	{"restore no checkpoint", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: "s-1"})
		return err
	}, "checkpoint"},
	{"list checkpoints no id", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.ListCheckpoints(ctx, &themisv1.ListCheckpointsRequest{})
		return err
	}, "session_id"},
	{"delete checkpoint no checkpoint", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.DeleteCheckpoint(ctx, &themisv1.DeleteCheckpointRequest{SessionId: "s-1"})
		return err
	}, "checkpoint"},
	{"apply no id", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Apply(ctx, &themisv1.ApplyRequest{Op: &themisv1.Op{Op: &themisv1.Op_Sync{Sync: &agentv1.Sync{}}}})
		return err
	}, "session_id"},
	{"apply no op", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: "s-1"})
		return err
	}, "op"},
	{"apply op unset", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: "s-1", Op: &themisv1.Op{}})
		return err
	}, "op"},
	{"fingerprint bad time mode", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: "s-1", TimeMode: 9})
		return err
	}, "time_mode"},
	{"fingerprint empty lane", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: "s-1", Lanes: []string{""}})
		return err
	}, "lanes[0]"},
	{"stat no lane", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.Stat(ctx, &themisv1.StatRequest{SessionId: "s-1", Path: "f"})
		return err
	}, "lane"},
	{"read negative offset", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.ReadFile(ctx, &themisv1.ReadFileRequest{SessionId: "s-1", Lane: "a", Offset: -1})
		return err
	}, "offset"},
	{"read too long", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.ReadFile(ctx, &themisv1.ReadFileRequest{SessionId: "s-1", Lane: "a", Length: MaxReadLength + 1})
		return err
	}, "length"},
	{"restore file no path", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.RestoreFile(ctx, &themisv1.RestoreFileRequest{SessionId: "s-1", Checkpoint: "c-1", Lane: "a"})
		return err
	}, "path"},
	{"events negative after", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.ListEvents(ctx, &themisv1.ListEventsRequest{SessionId: "s-1", AfterSeq: -1})
		return err
	}, "after_seq"},
	{"events negative limit", func(ctx context.Context, c themisv1.ThemisClient) error {
		_, err := c.ListEvents(ctx, &themisv1.ListEventsRequest{SessionId: "s-1", Limit: -1})
		return err
	}, "limit"},
}

// checkBadInputs runs badInputs against c and checks each is refused with
// InvalidArgument naming its field, without reaching the domain.
func checkBadInputs(t *testing.T, c themisv1.ThemisClient, f *fakeDomain) {
	t.Helper()
	for _, tt := range badInputs {
		err := tt.call(t.Context(), c)
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.field+": ") {
			t.Errorf("%s: got %v %q, want InvalidArgument starting %q", tt.name, st.Code(), st.Message(), tt.field+": ")
		}
		if got := badField(st); got != tt.field {
			t.Errorf("%s: BadRequest field = %q, want %q", tt.name, got, tt.field)
		}
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("bad input reached the domain: %v", calls)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	f := &fakeDomain{}
	checkBadInputs(t, themisv1.NewThemisClient(serve(t, f)), f)
}

func TestDomainErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err   error
		code  codes.Code
		field string
	}{
		{fmt.Errorf("create: %w", errkind.Invalid("lanes[1]", "unknown filesystem %q", "zfs")), codes.InvalidArgument, "lanes[1]"},
		{fmt.Errorf("session s-9: %w", errkind.ErrNotFound), codes.NotFound, ""},
		{fmt.Errorf("session s-1 is ended: %w", errkind.ErrState), codes.FailedPrecondition, ""},
		{fmt.Errorf("4 sessions running: %w", errkind.ErrExhausted), codes.ResourceExhausted, ""},
		{errors.New("boom"), codes.Internal, ""},
	}
	for _, tt := range tests {
		f := &fakeDomain{err: tt.err}
		c := themisv1.NewThemisClient(serve(t, f))
		_, err := c.CreateSession(t.Context(), &themisv1.CreateSessionRequest{Lanes: []string{"ext2", "ext4"}})
		st := status.Convert(err)
		if st.Code() != tt.code || st.Message() != tt.err.Error() || badField(st) != tt.field {
			t.Errorf("domain error %v: got %v %q field %q, want %v field %q", tt.err, st.Code(), st.Message(), badField(st), tt.code, tt.field)
		}
	}
}

func TestHealthAndReflection(t *testing.T) {
	t.Parallel()
	conn := serve(t, &fakeDomain{})
	checkHealthAndReflection(t, conn)
}

func checkHealthAndReflection(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	ctx := t.Context()
	for _, svc := range []string{"", "themis.v1.Themis"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, resp, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"themis.v1.Themis", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, want %s among them", names, want)
		}
	}
}
