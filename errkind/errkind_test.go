package errkind

import (
	"errors"
	"fmt"
	"testing"
)

// TestFieldError: a FieldError names its field, says what is wrong, and is
// ErrInvalid (wrapped too), never another kind.
func TestFieldError(t *testing.T) {
	err := fmt.Errorf("create: %w", Invalid("lanes[1]", "%q: unknown filesystem", "zfs"))
	var fe *FieldError
	switch {
	case !errors.As(err, &fe) || fe.Field != "lanes[1]":
		t.Errorf("errors.As(%v) = %+v: want the FieldError of lanes[1]", err, fe)
	case err.Error() != `create: lanes[1]: "zfs": unknown filesystem`:
		t.Errorf("Error() = %q", err.Error())
	case !errors.Is(err, ErrInvalid):
		t.Errorf("%v is not ErrInvalid", err)
	}
	for _, other := range []error{ErrNotFound, ErrState, ErrExhausted} {
		if errors.Is(err, other) {
			t.Errorf("%v is %v too", err, other)
		}
	}
}
