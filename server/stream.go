package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/themisfs/themis/errkind"
)

// runStream sends a run's events on a server stream through a bounded
// buffer, so that a client that does not read stalls the run for at most
// wait: a goroutine of its own does every Send, the run only queues. A
// progress message replaces the one still queued (progress is coalesced);
// every other message and the summary are kept, in order. When the buffer
// holds limit messages and no room comes within wait, the run's context is
// cancelled (cause: client not reading, errkind.ErrExhausted) and the RPC
// ends with ResourceExhausted; a failed Send cancels the run too. end maps
// the run's error or the stream's through toStatus, like every other error
// of the API.
type runStream[T any] struct {
	what       string // the RPC, for the errors
	stream     runSender[T]
	isProgress func(T) bool // nil: nothing is coalesced
	limit      int
	wait       time.Duration
	cancel     context.CancelCauseFunc // cancels the run's context

	mu      sync.Mutex
	queue   []T
	closing bool  // end was called: the sender stops once the queue is empty
	err     error // the first failed send, or the stall that cancelled the run

	more   chan struct{} // signalled when the queue grows or closes
	room   chan struct{} // signalled when the sender takes a message
	exited chan struct{} // closed when the sender returns
}

// runSender is the server stream of a run's RPC.
type runSender[T any] interface {
	Send(T) error
	Context() context.Context
}

// newRunStream starts the sender of a run's stream and returns it with the
// context to run under: the stream's, also cancelled when the stream gives
// up on the client.
func newRunStream[T any](s *Server, what string, stream runSender[T], isProgress func(T) bool) (*runStream[T], context.Context) {
	ctx, cancel := context.WithCancelCause(stream.Context())
	r := &runStream[T]{
		what: what, stream: stream, isProgress: isProgress, limit: max(s.streamBuffer, 1), wait: s.streamWait, cancel: cancel,
		more: make(chan struct{}, 1), room: make(chan struct{}, 1), exited: make(chan struct{}),
	}
	go r.sender(stream.Context())
	return r, ctx
}

// signal wakes whoever waits on c, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sender sends the queued messages until end closes an empty queue, a
// send fails or the stream ends (ctx: the handler returned, by a panic too).
func (r *runStream[T]) sender(ctx context.Context) {
	defer close(r.exited)
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			closing := r.closing
			r.mu.Unlock()
			if closing {
				return
			}
			select {
			case <-r.more:
			case <-ctx.Done():
				return
			}
			continue
		}
		m := r.queue[0]
		var zero T
		r.queue[0] = zero
		r.queue = r.queue[1:]
		r.mu.Unlock()
		signal(r.room)
		if err := r.stream.Send(m); err != nil {
			err = fmt.Errorf("%s: send: %w", r.what, err)
			r.mu.Lock()
			if r.err == nil {
				r.err = err
			}
			r.mu.Unlock()
			r.cancel(err)
			signal(r.room) // a run waiting for room gives up at once
			return
		}
	}
}

// send queues m: a progress message in place of the one queued, anything
// else at the end, waiting up to wait for room. A run past that wait is
// cancelled, and from then on (or after a failed send) m is dropped.
func (r *runStream[T]) send(m T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	if r.isProgress != nil && r.isProgress(m) {
		for i, q := range r.queue {
			if r.isProgress(q) {
				r.queue = append(r.queue[:i], r.queue[i+1:]...)
				break
			}
		}
		r.queue = append(r.queue, m)
		signal(r.more)
		return
	}
	deadline := time.Now().Add(r.wait)
	for len(r.queue) >= r.limit && r.err == nil {
		left := time.Until(deadline)
		if left <= 0 {
			r.stall()
			return
		}
		r.mu.Unlock()
		t := time.NewTimer(left)
		select {
		case <-r.room:
		case <-t.C:
		}
		t.Stop()
		r.mu.Lock()
	}
	if r.err == nil {
		r.queue = append(r.queue, m)
		signal(r.more)
	}
}

// stall records that the client stopped reading and cancels the run. r.mu
// is held.
func (r *runStream[T]) stall() {
	r.err = fmt.Errorf("%s: client not reading the stream: %d messages queued for %v: %w", r.what, len(r.queue), r.wait, errkind.ErrExhausted)
	r.queue = nil
	r.cancel(r.err)
}

// end finishes the stream of a run that returned runErr: what is queued is
// sent, then the summary summary builds (when the run succeeded), all within
// wait; the error is the stall or failed send that stopped the stream, else
// the run's.
func (r *runStream[T]) end(runErr error, summary func() T) error {
	defer r.cancel(nil)
	if runErr == nil {
		r.send(summary())
	}
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	signal(r.more)
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-r.exited:
	case <-t.C:
		r.mu.Lock()
		if r.err == nil {
			r.stall()
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	if err != nil {
		// A stalled sender is stuck in Send; it returns once the handler
		// has returned and gRPC has closed the stream.
		return toStatus(err)
	}
	return toStatus(runErr)
}
