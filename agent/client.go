package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// ErrBroken reports a client whose stream is no longer usable: an earlier
// call timed out, was cancelled or failed on the stream, which may have left
// it in the middle of a frame.
var ErrBroken = errors.New("agent: client broken")

// ErrBadResponse reports a response the agent could not honestly have
// sent: a frame that does not decode or is longer than MaxFrame, an id
// not yet asked for, a length, size or count that is negative, beyond
// what was asked for or beyond a host bound. Nothing from the guest is trusted; a caller
// that finds such a response wraps ErrBadResponse, and a session treats
// it like a dead guest (it fails that session, never the daemon).
var ErrBadResponse = errors.New("agent: bad response")

// Bounds on what one response may make the host hold.
const (
	// maxStale is how many stale responses (ids of earlier calls) one call
	// discards; past it the agent is answering with old ids forever.
	maxStale = 64
	// MaxErrorText is the most bytes of a response's error text the host
	// keeps (in errors, events, the ledger); a longer one is clipped to it
	// and clipMark appended.
	MaxErrorText = 4 << 10
	// maxVersion is the most bytes of the agent's version string kept.
	maxVersion = 256
	// maxSeekError is the most bytes of an entry's seek error kept.
	maxSeekError = 256
)

// clipMark ends a clipped error text.
const clipMark = " …(clipped)"

// deadliner is the part of net.Conn that lets a call be interrupted.
type deadliner interface {
	SetDeadline(t time.Time) error
}

// Client is the host side of the protocol over a byte stream, usually a
// net.Conn to QEMU's chardev socket. It is safe for concurrent use; calls are
// serialized.
type Client struct {
	rw  io.ReadWriter
	log *zap.Logger

	mu     sync.Mutex
	nextID uint64
	broken error // the failure that broke the stream; nil while usable
}

// NewClient returns a client speaking over rw. A nil log discards messages.
// The client does not close rw.
func NewClient(rw io.ReadWriter, log *zap.Logger) *Client {
	if log == nil {
		log = zap.NewNop()
	}
	return &Client{rw: rw, log: log}
}

// Call sends req, after setting req.Id to a fresh id, and returns the
// response with that id; responses to earlier ids are discarded. A non-zero
// Response.Errno is the operation's result, not an error of Call (see
// [ResponseError]).
//
// Call honours ctx: when rw has SetDeadline (a net.Conn) the call is bounded
// by ctx's deadline and interrupted on cancellation; otherwise it returns on
// cancellation and leaves the I/O pending in the background. Either way the
// stream's position is then unknown, so a timed-out, cancelled or failed call
// breaks the client and every later call returns an error wrapping ErrBroken
// (and the original cause).
func (c *Client) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return nil, fmt.Errorf("%w: %w", ErrBroken, c.broken)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("agent: call: %w", err)
	}
	c.nextID++
	id := c.nextID
	req.Id = id

	var resp *agentv1.Response
	var err error
	if d, ok := c.rw.(deadliner); ok {
		resp, err = c.callDeadline(ctx, d, req)
	} else {
		resp, err = c.callAsync(ctx, req)
	}
	if err != nil {
		c.broken = err
		return nil, err
	}
	return resp, nil
}

// callDeadline runs one exchange on a stream with deadlines.
func (c *Client) callDeadline(ctx context.Context, d deadliner, req *agentv1.Request) (*agentv1.Response, error) {
	dl, _ := ctx.Deadline() // zero (no deadline) when ctx has none
	if err := d.SetDeadline(dl); err != nil {
		return nil, fmt.Errorf("agent: call %d: set deadline: %w", req.Id, err)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		// A deadline in the past wakes the blocked Read or Write.
		if err := d.SetDeadline(time.Unix(1, 0)); err != nil {
			c.log.Debug("agent: interrupt call", zap.Error(err))
		}
	})
	resp, err := c.exchange(req)
	if !stop() {
		<-fired
	}
	if err != nil {
		cause := ctx.Err()
		if cause == nil && errors.Is(err, os.ErrDeadlineExceeded) && !dl.IsZero() && !time.Now().Before(dl) {
			cause = context.DeadlineExceeded
		}
		if cause != nil {
			return nil, fmt.Errorf("agent: call %d: %w (%w)", req.Id, cause, err)
		}
		return nil, fmt.Errorf("agent: call %d: %w", req.Id, err)
	}
	if ctx.Err() != nil {
		// The interrupt fired after the exchange completed; the stream is
		// fine but its deadline is in the past. Clear it below.
		c.log.Debug("agent: call completed as its context ended", zap.Uint64("id", req.Id))
	}
	if err := d.SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("agent: call %d: clear deadline: %w", req.Id, err)
	}
	return resp, nil
}

// callAsync runs one exchange in a goroutine so that a cancelled ctx can
// return without it; the goroutine ends when the stream does.
func (c *Client) callAsync(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	type result struct {
		resp *agentv1.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.exchange(req)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("agent: call %d: %w", req.Id, r.err)
		}
		return r.resp, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("agent: call %d: %w", req.Id, ctx.Err())
	}
}

// exchange writes req and reads frames until the response with req's id,
// discarding at most maxStale stale ones; the response's error texts are
// clipped to MaxErrorText.
func (c *Client) exchange(req *agentv1.Request) (*agentv1.Response, error) {
	if err := WriteFrame(c.rw, req); err != nil {
		return nil, err
	}
	for stale := 0; ; stale++ {
		if stale > maxStale {
			return nil, fmt.Errorf("agent: more than %d stale responses for call %d: %w", maxStale, req.Id, ErrBadResponse)
		}
		resp := new(agentv1.Response)
		if err := ReadFrame(c.rw, resp); err != nil {
			switch {
			case errors.Is(err, io.EOF):
				err = fmt.Errorf("agent: stream closed: %w", io.ErrUnexpectedEOF)
			case errors.Is(err, ErrDecode), errors.Is(err, ErrFrameTooLarge):
				// Our agent frames only messages, within MaxFrame.
				err = fmt.Errorf("%w: %w", err, ErrBadResponse)
			}
			return nil, err
		}
		switch id := resp.GetId(); {
		case id == req.Id:
			clipErrors(resp)
			return resp, nil
		case id == 0:
			// The agent could not decode a frame; ours is the only one in flight.
			clipErrors(resp)
			if err := ResponseError(resp); err != nil {
				return nil, fmt.Errorf("agent: request rejected: %w", err)
			}
			return nil, fmt.Errorf("agent: request rejected (id 0) without an error: %w", ErrBadResponse)
		case id < req.Id:
			c.log.Debug("agent: discard stale response", zap.Uint64("id", id), zap.Uint64("want", req.Id))
		default:
			return nil, fmt.Errorf("agent: response id %d from the future (want %d): %w", id, req.Id, ErrBadResponse)
		}
	}
}

// clipErrors clips the error text of resp and of the responses of a batch
// in it (one level: a batch holds no batch) to MaxErrorText bytes, a
// ping's version to maxVersion, and a fingerprint's seek errors to
// maxSeekError.
func clipErrors(resp *agentv1.Response) {
	clipTexts(resp)
	if p := resp.GetPing(); p != nil {
		p.Version = clip(p.GetVersion(), maxVersion)
	}
	for _, r := range resp.GetBatch().GetResponses() {
		clipTexts(r)
	}
}

// clipTexts clips one response's error and its fingerprint's seek errors.
func clipTexts(r *agentv1.Response) {
	r.Error = clip(r.GetError(), MaxErrorText)
	for _, e := range r.GetFingerprint().GetLeaves() {
		e.SeekError = clip(e.GetSeekError(), maxSeekError)
	}
}

// clip returns s cut to at most n bytes (on a rune boundary) with clipMark
// appended, or s itself when it fits.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + clipMark
}

// Error is a failed operation's errno and message as the agent reported them.
type Error struct {
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string {
	if e.Msg != "" {
		return "agent: " + e.Msg
	}
	return "agent: " + e.Errno.Error()
}

// Unwrap returns the errno, so errors.Is(err, syscall.ENOENT) works.
func (e *Error) Unwrap() error { return e.Errno }

// ResponseError returns nil when resp reports success, else an *Error.
func ResponseError(resp *agentv1.Response) error {
	if resp.GetErrno() == 0 && resp.GetError() == "" {
		return nil
	}
	errno := syscall.Errno(resp.GetErrno())
	if errno == 0 {
		errno = syscall.EIO
	}
	return &Error{Errno: errno, Msg: resp.GetError()}
}
