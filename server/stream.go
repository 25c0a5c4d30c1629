package server

import "fmt"

// runStream sends a run's events on a server stream: the first send that
// fails stops the sending and is kept, and end maps the run's error or that
// send error through toStatus, like every other error of the API.
type runStream[T any] struct {
	what   string // the RPC, for the send error
	stream interface{ Send(T) error }
	err    error // the first failed send
}

func newRunStream[T any](what string, stream interface{ Send(T) error }) *runStream[T] {
	return &runStream[T]{what: what, stream: stream}
}

// send sends m unless an earlier send failed.
func (r *runStream[T]) send(m T) {
	if r.err == nil {
		r.err = r.stream.Send(m)
	}
}

// end finishes the stream of a run that returned runErr: the run's error,
// else the summary summary builds, sent last.
func (r *runStream[T]) end(runErr error, summary func() T) error {
	if runErr != nil {
		return toStatus(runErr)
	}
	r.send(summary())
	if r.err != nil {
		return toStatus(fmt.Errorf("%s: send: %w", r.what, r.err))
	}
	return nil
}
