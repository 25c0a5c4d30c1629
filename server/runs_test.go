package server

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// bigFinding is a finding of about 64 KiB on the wire.
func bigFinding(i int) session.Finding {
	return session.Finding{ID: "f-big", Session: "s-1", Kind: "errno-divergence", Detail: strings.Repeat("x", 64<<10), Seed: uint64(i)}
}

// floodDomain is a fakeDomain whose Explore sends big findings until its
// context ends, then reports why it ended.
type floodDomain struct {
	*fakeDomain
	ended chan error // the run's context's cause
}

func (f *floodDomain) Explore(ctx context.Context, _ exploration.Options, progress func(exploration.Progress), found func(session.Finding)) (*exploration.Summary, error) {
	for i := 0; ctx.Err() == nil && i < 10000; i++ {
		progress(exploration.Progress{States: i})
		found(bigFinding(i))
	}
	f.ended <- context.Cause(ctx)
	return &exploration.Summary{Session: "s-1", Stopped: "cancelled"}, nil
}

// serveSlow serves srv on a loopback TCP listener and dials it with the
// smallest flow-control windows gRPC allows, so that a client that does not
// read blocks the server's sends after a few hundred KiB.
func serveSlow(t *testing.T, srv *Server) themisv1.ThemisClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	Register(s, srv)
	go func() { _ = s.Serve(lis) }() // returns nil after Stop
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10), grpc.WithReadBufferSize(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close() // the stream under test may still be open
		s.Stop()
	})
	return themisv1.NewThemisClient(conn)
}

// TestExploreClientNotReading checks that a client that never reads its
// stream stalls the run only for the bounded wait: then the run's context
// is cancelled (cause: client not reading) and the RPC ends with
// ResourceExhausted once the client reads what was sent.
func TestExploreClientNotReading(t *testing.T) {
	f := &floodDomain{fakeDomain: &fakeDomain{}, ended: make(chan error, 1)}
	srv := New(f, zaptest.NewLogger(t))
	srv.streamBuffer, srv.streamWait = 4, 200*time.Millisecond
	c := serveSlow(t, srv)
	stream, err := c.Explore(t.Context(), &themisv1.ExploreRequest{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-f.ended:
		if !errors.Is(cause, errkind.ErrExhausted) || !strings.Contains(cause.Error(), "client not reading") {
			t.Errorf("run's context ended with %v, want client not reading (ErrExhausted)", cause)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run still blocked 15s after its client stopped reading")
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "client not reading") {
			t.Errorf("stream ended with %v, want ResourceExhausted: client not reading", err)
		}
		break
	}
}

// TestExploreProgressCoalesced checks that progress messages do not fill
// the buffer (older ones are dropped) while findings and the summary are
// all delivered to a client that reads late.
func TestExploreProgressCoalesced(t *testing.T) {
	var sent sync.WaitGroup
	sent.Add(1)
	f := &progressDomain{fakeDomain: &fakeDomain{}, sent: &sent}
	srv := New(f, zaptest.NewLogger(t))
	srv.streamBuffer, srv.streamWait = 4, 10*time.Second
	c := serveSlow(t, srv)
	stream, err := c.Explore(t.Context(), &themisv1.ExploreRequest{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	sent.Wait() // the run is done before the client reads anything
	var findings, progress, summaries int
	for {
		r, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.OK && !strings.Contains(err.Error(), "EOF") {
				t.Fatalf("stream: %v", err)
			}
			break
		}
		switch r.GetEvent().(type) {
		case *themisv1.ExploreResponse_Progress:
			progress++
		case *themisv1.ExploreResponse_Finding:
			findings++
		case *themisv1.ExploreResponse_Summary:
			summaries++
		}
	}
	if findings != 3 || summaries != 1 || progress == 0 || progress >= 100000 {
		t.Errorf("got %d findings, %d summaries, %d progress: want 3, 1, and some but not all 100000 progress", findings, summaries, progress)
	}
}

// progressDomain sends 100000 progress messages and 3 findings.
type progressDomain struct {
	*fakeDomain
	sent *sync.WaitGroup
}

func (f *progressDomain) Explore(ctx context.Context, _ exploration.Options, progress func(exploration.Progress), found func(session.Finding)) (*exploration.Summary, error) {
	defer f.sent.Done()
	for i := range 100000 {
		progress(exploration.Progress{States: i})
		if i%40000 == 0 {
			found(session.Finding{ID: "f-1", Kind: "errno-divergence"})
		}
	}
	return &exploration.Summary{Session: "s-1"}, nil
}

// panicMachine is a machine double that panics at the first operation
// that is not a mount.
type panicMachine struct{ *sessiontest.Machine }

func (p *panicMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if _, ok := req.Op.(*agentv1.Request_Mount); !ok {
		panic("machine double: boom")
	}
	return p.Machine.Call(ctx, req)
}

// startManager serves a session manager over machines from newMachine
// (max_sessions 1) on a unix socket and returns a client.
func startManager(t *testing.T, newMachine func(vmm.Config) vmm.Machine) *client.Client {
	t.Helper()
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{MaxSessions: 1}, newMachine)
	sock := filepath.Join(sockDir(t), "themisd.sock")
	d, err := StartDaemonWith(t.Context(), Config{Listen: "unix://" + sock, StateDir: t.TempDir()}, NewDomain(m), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, d)
	return dial(t, d.Addr(), client.Options{})
}

// TestRunPanicFreesSession checks that a panic inside a run (here in the
// machine's Call) ends the RPC with Internal, ends the run's session and
// frees its slot: with max_sessions 1 the next session boots, and the
// daemon still serves.
func TestRunPanicFreesSession(t *testing.T) {
	c := startManager(t, func(vmm.Config) vmm.Machine { return &panicMachine{&sessiontest.Machine{}} })
	ctx := t.Context()
	stream, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{"ext2"}, Depth: 1})
	if err == nil {
		for err == nil {
			_, err = stream.Recv()
		}
	}
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Explore over a panicking machine: %v, want Internal naming the panic", err)
	}
	resp, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{All: true})
	if err != nil || len(resp.GetSessions()) != 1 || resp.GetSessions()[0].GetState() == themisv1.Session_STATE_RUNNING {
		t.Fatalf("sessions after the panic: %v, %v: want one, not running", resp, err)
	}
	if _, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2"}}); err != nil {
		t.Errorf("CreateSession after the panicking run (max_sessions 1): %v", err)
	}
}

// delayMachine is a machine double whose every agent call takes 5 ms.
type delayMachine struct{ *sessiontest.Machine }

func (d *delayMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.Machine.Call(ctx, req)
}

// padDomain runs the real explore, sending eight big findings besides
// each progress message, so that a stream that is not read fills fast.
type padDomain struct{ ManagedDomain }

func (p padDomain) Explore(ctx context.Context, o exploration.Options, progress func(exploration.Progress), found func(session.Finding)) (*exploration.Summary, error) {
	return p.ManagedDomain.Explore(ctx, o, func(pr exploration.Progress) {
		progress(pr)
		for i := range 8 {
			found(bigFinding(i))
		}
	}, found)
}

// TestExploreClientNotReadingFreesSession runs a real explore (session
// manager, machine double) for a client that never reads its stream: the
// run is cancelled within a bound, its session ends and its slot
// (max_sessions 1) is free for the next session.
func TestExploreClientNotReadingFreesSession(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{MaxSessions: 1},
		func(vmm.Config) vmm.Machine { return &delayMachine{&sessiontest.Machine{}} })
	srv := New(padDomain{NewDomain(m)}, zaptest.NewLogger(t))
	srv.streamBuffer, srv.streamWait = 4, 200*time.Millisecond
	c := serveSlow(t, srv)
	ctx := t.Context()
	if _, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{"ext2"}, Depth: 3}); err != nil {
		t.Fatal(err)
	}
	var ended *session.Info
	for deadline := time.Now().Add(20 * time.Second); ended == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ins, err := m.List(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(ins) == 1 && ins[0].State != session.StateRunning {
			ended = ins[0]
		}
	}
	if ended == nil {
		t.Fatal("the run's session still running 20s after its client stopped reading")
	}
	if !strings.Contains(ended.Reason, "(explore: client not reading the stream") {
		t.Errorf("session ended with reason %q, want it to name the client not reading", ended.Reason)
	}
	if _, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}}); err != nil {
		t.Errorf("Create after the stalled run (max_sessions 1): %v", err)
	}
}

// TestStreamStallConfig checks limits.stream_stall_s and
// limits.stream_buffer: a value out of range is refused naming its key,
// and a daemon with them set cancels the run of a client that does not
// read its stream once that many messages waited that long, instead of
// DefaultStreamBuffer for DefaultStreamWait.
func TestStreamStallConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limits Limits
		key    string
	}{
		{Limits{StreamStallS: -1}, "limits.stream_stall_s"},
		{Limits{StreamBuffer: -1}, "limits.stream_buffer"},
		{Limits{StreamBuffer: MaxStreamBuffer + 1}, "limits.stream_buffer: at most"},
	} {
		_, err := startDaemon(t.Context(), Config{Listen: "unix:///tmp/x.sock", StateDir: t.TempDir(), Limits: tc.limits},
			zaptest.NewLogger(t), fakeOpen(&fakeDomain{}))
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%+v: err = %v, want it to name %s", tc.limits, err, tc.key)
		}
	}

	f := &floodDomain{fakeDomain: &fakeDomain{}, ended: make(chan error, 1)}
	sock := filepath.Join(sockDir(t), "themisd.sock")
	d, err := startDaemon(t.Context(), Config{Listen: "unix://" + sock, StateDir: t.TempDir(), Limits: Limits{StreamStallS: 1, StreamBuffer: 4}},
		zaptest.NewLogger(t), func(context.Context, Config, func(time.Duration), *zap.Logger) (managedDomain, error) { return f, nil })
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, d)
	c := dial(t, d.Addr(), client.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel() // the unread stream, before the daemon's shutdown
	if _, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{"ext2"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-f.ended:
		if !errors.Is(cause, errkind.ErrExhausted) || !strings.Contains(cause.Error(), "4 messages queued for 1s") {
			t.Errorf("run's context ended with %v, want client not reading, 4 messages queued for 1s (ErrExhausted)", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run still going 20s after its client stopped reading (stream_stall_s 1)")
	}
}
