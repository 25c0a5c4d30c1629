package inguest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// ping returns a Ping request, as agent's tests build it.
func ping() *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
}

// serve runs s on one end of a pipe and returns the other end and a function
// that waits for Serve's result (idempotent).
func serve(t *testing.T, s *Server) (net.Conn, func() error) {
	t.Helper()
	host, guest := net.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- s.Serve(guest)
	}()
	wait := sync.OnceValue(func() error {
		err := <-done
		if cerr := guest.Close(); cerr != nil && err == nil {
			err = cerr
		}
		return err
	})
	t.Cleanup(func() {
		if err := host.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := wait(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return host, wait
}

func TestClientServerRoundTrip(t *testing.T) {
	t.Parallel()
	s, dir := newServer(t)
	setup(t, dir)
	conn, _ := serve(t, s)
	c := agent.NewClient(conn, zaptest.NewLogger(t))
	ctx := context.Background()
	for i := uint64(1); i <= 3; i++ {
		resp, err := c.Call(ctx, ping())
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetId() != i || resp.GetPing().GetVersion() != "test" {
			t.Errorf("response %d = %v", i, resp)
		}
	}
	resp, err := c.Call(ctx, unlink("missing"))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.ResponseError(resp); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("unlink missing: %v", err)
	}
	// A large write close to the frame limit.
	data := bytes.Repeat([]byte{'z'}, agent.MaxFrame-1024)
	resp, err = c.Call(ctx, write("d/f", 0, 0, data, 0, 0))
	if err != nil || resp.GetRet() != int64(len(data)) {
		t.Fatalf("big write: %v, %v", resp, err)
	}
}

func TestClientDoneContext(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	conn, _ := serve(t, s)
	c := agent.NewClient(conn, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Call(ctx, ping()); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// Nothing was sent, so the client still works.
	if _, err := c.Call(context.Background(), ping()); err != nil {
		t.Fatalf("after a call that never started: %v", err)
	}
	// A deadline that has not passed does not linger on the conn.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, ping()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Call(context.Background(), ping()); err != nil {
		t.Fatalf("call after an earlier deadline passed: %v", err)
	}
}

func TestServerEOF(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	conn, wait := serve(t, s)
	c := agent.NewClient(conn, nil)
	if _, err := c.Call(context.Background(), ping()); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Errorf("Serve after EOF = %v, want nil", err)
	}
	// The client sees the stream gone.
	if _, err := c.Call(context.Background(), ping()); err == nil {
		t.Error("call on a closed stream succeeded")
	}
}

func TestServeBadFrames(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	var in bytes.Buffer
	// A valid ping, garbage of a valid length, another ping, then an oversized length.
	mustFrame(t, &in, &agentv1.Request{Id: 1, Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
	in.Write([]byte{0, 0, 0, 2, 0xff, 0xff})
	mustFrame(t, &in, &agentv1.Request{Id: 2, Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
	in.Write([]byte{0xff, 0xff, 0xff, 0xff})
	mustFrame(t, &in, &agentv1.Request{Id: 3, Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
	var out bytes.Buffer
	err := s.Serve(struct {
		io.Reader
		io.Writer
	}{&in, &out})
	if !errors.Is(err, agent.ErrFrameTooLarge) {
		t.Fatalf("Serve = %v, want ErrFrameTooLarge", err)
	}
	var got []string
	for {
		resp := new(agentv1.Response)
		if err := agent.ReadFrame(&out, resp); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
		got = append(got, string(rune('0'+resp.GetId()))+":"+syscall.Errno(resp.GetErrno()).Error())
	}
	want := []string{"1:errno 0", "0:invalid argument", "2:errno 0", "0:invalid argument"}
	if len(got) != len(want) {
		t.Fatalf("responses %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("response %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestServeOversizedResponse(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	s.testHook = func(req *agentv1.Request, resp *agentv1.Response) {
		if req.GetReadFile() != nil {
			resp.Result = &agentv1.Response_ReadFile{ReadFile: &agentv1.ReadFileResult{Data: make([]byte, agent.MaxFrame)}}
		}
	}
	conn, _ := serve(t, s)
	c := agent.NewClient(conn, zaptest.NewLogger(t))
	resp, err := c.Call(context.Background(), readReq("x", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if errnoOf(resp) != syscall.E2BIG || resp.GetReadFile() != nil {
		t.Errorf("oversized response: errno %v (%s)", errnoOf(resp), resp.GetError())
	}
	// The stream is still in step.
	if _, err := c.Call(context.Background(), ping()); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkPing(b *testing.B) {
	s := &Server{Root: b.TempDir(), Version: "bench"}
	host, guest := net.Pipe()
	go func() {
		if err := s.Serve(guest); err != nil {
			b.Error(err)
		}
	}()
	defer host.Close()
	c := agent.NewClient(host, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Call(ctx, ping()); err != nil {
			b.Fatal(err)
		}
	}
}

// mustFrame writes m as one frame, as agent's tests do.
func mustFrame(t testing.TB, w io.Writer, m proto.Message) {
	t.Helper()
	if err := agent.WriteFrame(w, m); err != nil {
		t.Fatal(err)
	}
}
