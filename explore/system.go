package explore

import (
	"context"
	"errors"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/internal/kreport"
)

// ErrGuestDied is wrapped by a System's errors when the machine under test
// is gone (kernel panic, agent silent). The Checker turns it into a
// finding ("guest-died", or "kernel" for a KernelCrash) instead of failing
// the run; see the package doc ("Workers") for when the search goes on.
var ErrGuestDied = errors.New("explore: guest died")

// KernelCrash is a System's error when the guest died and its kernel left
// a report (an Oops, a BUG, a WARN, a panic: package kreport): an
// ErrGuestDied whose finding is of kind "kernel" and carries the report.
type KernelCrash struct {
	Report kreport.Report
	// Err is the System's error (an ErrGuestDied).
	Err error
}

func (e *KernelCrash) Error() string {
	return "explore: kernel crash: " + e.Report.Summary() + ": " + e.Err.Error()
}

// Is makes a KernelCrash an ErrGuestDied.
func (e *KernelCrash) Is(target error) bool { return target == ErrGuestDied }

// Unwrap is the System's error.
func (e *KernelCrash) Unwrap() error { return e.Err }

// CheckpointID names a checkpoint of the whole System (machine and every
// lane's disk).
type CheckpointID = string

// LaneResult is one lane's outcome of an op.
type LaneResult struct {
	Lane string
	// Errno of the operation, 0 on success.
	Errno int32
}

// LaneState is one lane's fingerprint root.
type LaneState struct {
	Lane string
	Root []byte
	// Below is the lane's root seen from below (an overlay lane's upper
	// layer, markers classified), nil for lanes without one. It is
	// reported, not compared: the visited set, the digest and divergence
	// checks use Root only.
	Below []byte
	// Exact is the lane's root without the run's canonicalization, nil
	// when the System does not compute it. Lanes whose Roots agree and
	// whose Exacts differ are a state judged by a declared difference
	// (Result.DeclaredStates).
	Exact []byte
}

// System is what the Checker drives; the session implements it over a real
// guest (one machine, several lanes). Lanes must come back in the same order
// from every call.
type System interface {
	// Checkpoint saves the current state of every lane and returns its id.
	Checkpoint(ctx context.Context) (CheckpointID, error)
	// Restore returns to a checkpoint. The Checker only names the most
	// recent checkpoint it still holds.
	Restore(ctx context.Context, id CheckpointID) error
	// Drop deletes a checkpoint no longer needed. The Checker only drops the
	// most recent checkpoint it holds, possibly while the System is in a
	// state past it.
	Drop(ctx context.Context, id CheckpointID) error
	// Apply runs one op on every lane and returns each lane's errno. An
	// errno is a result, not an error.
	Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error)
	// Fingerprint returns every lane's root, under whatever time mode and
	// canonicalization policy the session was configured with.
	Fingerprint(ctx context.Context) ([]LaneState, error)
	// Leaves returns one lane's entries, canonicalized as Fingerprint's
	// roots were, to localize a divergence.
	Leaves(ctx context.Context, lane string) ([]*agentv1.Entry, error)
}
