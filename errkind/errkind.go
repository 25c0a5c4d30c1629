package errkind

import (
	"errors"
	"fmt"
)

// Error kinds: ErrInvalid -> InvalidArgument, ErrNotFound -> NotFound,
// ErrState -> FailedPrecondition, ErrExhausted -> ResourceExhausted.
var (
	ErrInvalid   = errors.New("invalid argument")
	ErrNotFound  = errors.New("not found")
	ErrState     = errors.New("wrong state")
	ErrExhausted = errors.New("resource exhausted")
)

// FieldError is bad input in a named request field. It wraps ErrInvalid.
type FieldError struct {
	// Field is the request field path, e.g. "lanes[1]" or "op.write.size".
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Msg) }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Invalid returns a FieldError.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
