package kvm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// maxStreamBuffer bounds the bytes the guest may send ahead of the host's
// reads on the agent channel (a frame is at most 16 MiB; one response is
// read at a time).
const maxStreamBuffer = 32 << 20

// errStreamFull is returned to the UART when the guest outruns the host.
var errStreamFull = errors.New("kvm: agent channel buffer full")

// stream is the host end of the agent channel on a UART: Read returns the
// bytes the guest transmitted (appended by guestWrite on the vCPU thread,
// never blocking it), Write hands bytes to feed (the UART's receive queue).
// It has deadlines like a net.Conn, so agent.Client can bound and interrupt
// a call.
type stream struct {
	feed func([]byte) error
	full error // feed's error for a full receive queue: wait and retry

	mu       sync.Mutex
	cond     *sync.Cond
	buf      []byte
	closed   error // non-nil once closed: reads drain buf, then return it
	deadline time.Time
	timer    *time.Timer
}

func newStream(feed func([]byte) error, full error) *stream {
	s := &stream{feed: feed, full: full}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// guestWrite appends what the guest sent; it never blocks.
func (s *stream) guestWrite(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return 0, s.closed
	}
	if len(s.buf)+len(p) > maxStreamBuffer {
		return 0, fmt.Errorf("%w (%d bytes unread)", errStreamFull, len(s.buf))
	}
	s.buf = append(s.buf, p...)
	s.cond.Broadcast()
	return len(p), nil
}

// Read implements io.Reader.
func (s *stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.buf) == 0 {
		if s.closed != nil {
			return 0, s.closed
		}
		if !s.deadline.IsZero() && !time.Now().Before(s.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		s.cond.Wait()
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf = nil
	}
	return n, nil
}

// feedChunk is how much Write hands the UART at once; the guest drains its
// receive queue as fast as its tty takes it (no flow control on the line).
const feedChunk = 64 << 10

// Write implements io.Writer: the bytes go to the guest's receive queue, in
// chunks, waiting while the queue is full (until the deadline).
func (s *stream) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		s.mu.Lock()
		closed, dl := s.closed, s.deadline
		s.mu.Unlock()
		if closed != nil {
			return n, closed
		}
		if !dl.IsZero() && !time.Now().Before(dl) {
			return n, os.ErrDeadlineExceeded
		}
		chunk := p[n:min(len(p), n+feedChunk)]
		err := s.feed(chunk)
		switch {
		case err == nil:
			n += len(chunk)
		case s.full != nil && errors.Is(err, s.full):
			time.Sleep(200 * time.Microsecond)
		default:
			return n, err
		}
	}
	return n, nil
}

// SetDeadline bounds Read and Write; a time in the past wakes a blocked Read.
func (s *stream) SetDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = t
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !t.IsZero() {
		s.timer = time.AfterFunc(time.Until(t), func() {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		})
	}
	s.cond.Broadcast()
	return nil
}

// reset drops unread bytes (a restore puts the guest back to a point where
// it had sent nothing the host has not read).
func (s *stream) reset() {
	s.mu.Lock()
	s.buf = nil
	s.mu.Unlock()
}

// reopen makes a closed stream usable again (a dead guest restored to a
// checkpoint).
func (s *stream) reopen() {
	s.mu.Lock()
	s.closed = nil
	s.buf = nil
	s.mu.Unlock()
}

// closeWith makes every later Read (once drained) and Write fail with err.
func (s *stream) closeWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed == nil {
		s.closed = err
		if s.timer != nil {
			s.timer.Stop()
		}
		s.cond.Broadcast()
	}
}

var _ io.ReadWriter = (*stream)(nil)
