package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func ping() *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
}

// drain reads conn until it closes, like an agent that never answers.
func drain(conn net.Conn) {
	// The copy ends with an error when the pipe closes; that is its purpose.
	_, _ = io.Copy(io.Discard, conn)
}

// fakeAgent reads one request and answers with the given responses, each
// with its id computed from the request's.
func fakeAgent(conn net.Conn, ids func(req uint64) []uint64) {
	go func() {
		for {
			req := new(agentv1.Request)
			if err := ReadFrame(conn, req); err != nil {
				return
			}
			for _, id := range ids(req.GetId()) {
				if err := WriteFrame(conn, &agentv1.Response{Id: id, Ret: int64(id)}); err != nil {
					return
				}
			}
		}
	}()
}

func TestClientDiscardsStale(t *testing.T) {
	t.Parallel()
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	fakeAgent(guest, func(id uint64) []uint64 {
		if id == 2 {
			return []uint64{1, 1, 2} // two stale answers first
		}
		return []uint64{id}
	})
	c := NewClient(host, zaptest.NewLogger(t))
	for want := int64(1); want <= 3; want++ {
		resp, err := c.Call(context.Background(), ping())
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetRet() != want {
			t.Errorf("ret = %d, want %d", resp.GetRet(), want)
		}
	}
}

func TestClientFutureID(t *testing.T) {
	t.Parallel()
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	fakeAgent(guest, func(id uint64) []uint64 { return []uint64{id + 5} })
	c := NewClient(host, zaptest.NewLogger(t))
	if _, err := c.Call(context.Background(), ping()); err == nil {
		t.Fatal("response from the future accepted")
	}
	if _, err := c.Call(context.Background(), ping()); !errors.Is(err, ErrBroken) {
		t.Fatalf("second call: %v, want ErrBroken", err)
	}
}

func TestClientTimeoutBreaks(t *testing.T) {
	t.Parallel()
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	// The agent reads but never answers.
	go drain(guest)
	c := NewClient(host, zaptest.NewLogger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, ping())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("call took %v", d)
	}
	_, err = c.Call(context.Background(), ping())
	if !errors.Is(err, ErrBroken) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("later call: %v, want ErrBroken wrapping the cause", err)
	}
}

func TestClientCancel(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"conn", "plain stream"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			host, guest := net.Pipe()
			defer host.Close()
			defer guest.Close()
			go drain(guest)
			var rw io.ReadWriter = host
			if name != "conn" {
				rw = struct {
					io.Reader
					io.Writer
				}{host, host}
			}
			c := NewClient(rw, nil)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			if _, err := c.Call(ctx, ping()); !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want Canceled", err)
			}
			if _, err := c.Call(context.Background(), ping()); !errors.Is(err, ErrBroken) {
				t.Fatalf("later call: %v, want ErrBroken", err)
			}
		})
	}
}

func TestClientAgentGone(t *testing.T) {
	t.Parallel()
	host, guest := net.Pipe()
	defer host.Close()
	go func() {
		// Read one request, then go away without answering.
		_ = ReadFrame(guest, new(agentv1.Request))
		_ = guest.Close()
	}()
	c := NewClient(host, nil)
	if _, err := c.Call(context.Background(), ping()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want ErrUnexpectedEOF", err)
	}
}

func mustFrame(t testing.TB, w io.Writer, m proto.Message) {
	t.Helper()
	if err := WriteFrame(w, m); err != nil {
		t.Fatal(err)
	}
}

// TestClientHostileReplies: an agent that answers with stale ids forever,
// or with an error text of megabytes, cannot hold a call for longer than
// a bounded number of frames, nor hand the host an unbounded string.
// answerID answers each request with an empty response of its id.
func answerID(id uint64) []*agentv1.Response { return []*agentv1.Response{{Id: id}} }

func TestClientHostileReplies(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("e", 1<<20)
	cases := []struct {
		name    string
		answer  func(id uint64) []*agentv1.Response // the frames sent for request id
		raw     []byte                              // sent instead for the second request, when set
		wantErr error                               // nil: the call succeeds
	}{
		{"endless stale", func(id uint64) []*agentv1.Response {
			if id == 1 {
				return []*agentv1.Response{{Id: 1}}
			}
			out := make([]*agentv1.Response, 10*maxStale)
			for i := range out {
				out[i] = &agentv1.Response{Id: 1}
			}
			return out
		}, nil, ErrBadResponse},
		{"a few stale", func(id uint64) []*agentv1.Response {
			if id == 1 {
				return []*agentv1.Response{{Id: 1}}
			}
			return []*agentv1.Response{{Id: id - 1}, {Id: id - 1}, {Id: id}}
		}, nil, nil},
		{"a frame that does not decode", answerID, []byte{0, 0, 0, 3, 0xff, 0xff, 0xff}, ErrBadResponse},
		{"a frame longer than MaxFrame", answerID, binary.BigEndian.AppendUint32(nil, MaxFrame+1), ErrBadResponse},
		{"an id from the future", func(id uint64) []*agentv1.Response {
			return []*agentv1.Response{{Id: id + 1}}
		}, nil, ErrBadResponse},
		{"long error", func(id uint64) []*agentv1.Response {
			return []*agentv1.Response{{Id: id, Errno: 5, Error: long}}
		}, nil, nil},
		{"long error in a batch", func(id uint64) []*agentv1.Response {
			return []*agentv1.Response{{Id: id, Result: &agentv1.Response_Batch{Batch: &agentv1.BatchResult{
				Responses: []*agentv1.Response{{Errno: 5, Error: long}}}}}}
		}, nil, nil},
		{"long seek error in a batch's fingerprint", func(id uint64) []*agentv1.Response {
			fp := &agentv1.Response{Result: &agentv1.Response_Fingerprint{Fingerprint: &agentv1.FingerprintResult{
				Leaves: []*agentv1.Entry{{Path: "f", SeekError: long}}}}}
			return []*agentv1.Response{{Id: id, Result: &agentv1.Response_Batch{Batch: &agentv1.BatchResult{
				Responses: []*agentv1.Response{fp}}}}}
		}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			host, guest := net.Pipe()
			defer host.Close()
			defer guest.Close()
			go func() {
				for {
					req := new(agentv1.Request)
					if err := ReadFrame(guest, req); err != nil {
						return
					}
					if tc.raw != nil && req.GetId() == 2 {
						if _, err := guest.Write(tc.raw); err != nil {
							return
						}
						continue
					}
					for _, r := range tc.answer(req.GetId()) {
						if err := WriteFrame(guest, r); err != nil {
							return
						}
					}
				}
			}()
			c := NewClient(host, zaptest.NewLogger(t))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var resp *agentv1.Response
			var err error
			for range 2 {
				if resp, err = c.Call(ctx, ping()); err != nil {
					break
				}
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range append([]*agentv1.Response{resp}, resp.GetBatch().GetResponses()...) {
				if n := len(r.GetError()); n > MaxErrorText+len(clipMark) {
					t.Errorf("error text of %d bytes reached the host, want at most %d", n, MaxErrorText+len(clipMark))
				}
				for _, e := range r.GetFingerprint().GetLeaves() {
					if n := len(e.GetSeekError()); n > maxSeekError+len(clipMark) {
						t.Errorf("a seek error of %d bytes reached the host, want at most %d", n, maxSeekError+len(clipMark))
					}
				}
			}
		})
	}
}
