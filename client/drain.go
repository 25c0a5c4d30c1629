package client

import (
	"errors"
	"io"
)

// Drain reads a server stream to its end: it calls recv (a generated
// stream's Recv) until it returns io.EOF, passing every message to each.
// It returns nil at io.EOF, and otherwise the first error of recv or each,
// as it is (recv's errors are gRPC statuses; callers add their context).
func Drain[T any](recv func() (T, error), each func(T) error) error {
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(m); err != nil {
			return err
		}
	}
}
