package session

import (
	"errors"
	"fmt"
	"testing"

	"github.com/themisfs/themis/errkind"
)

func TestFieldErrorIsInvalid(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("create: %w", errkind.Invalid("lanes[0]", "unknown filesystem %q", "zfs"))
	if !errors.Is(err, errkind.ErrInvalid) {
		t.Errorf("errors.Is(%v, errkind.ErrInvalid) = false", err)
	}
	var fe *errkind.FieldError
	if !errors.As(err, &fe) || fe.Field != "lanes[0]" {
		t.Errorf("errors.As: %v, field %q", fe, fe.Field)
	}
	if got, want := err.Error(), `create: lanes[0]: unknown filesystem "zfs"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
