package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/session"
)

// Lease is how a run starts, the one prologue of the runs over a chain
// (clock sweeps, corruption, crash states): a scratch dir of its own and
// the chain's first session.
type Lease struct {
	*Chain
	// Dir is the run's scratch dir, owned (internal/scratch): a daemon
	// that dies mid-run leaves it to the next one's startup sweep.
	Dir string
	sd  *scratch.Dir
}

// Start makes the scratch dir themis-<kind>-* and acquires the chain's
// first session (Acquire). The context it returns is the chain's: it ends
// on the session's Delete and at the daemon's longest run, across the
// chain's sessions. Close ends both.
func Start(ctx context.Context, m *session.Manager, o session.CreateOptions, kind string) (*Lease, context.Context, error) {
	sd, err := scratch.MkdirTemp("", "themis-"+kind+"-")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: scratch dir: %w", kind, err)
	}
	ch, err := Acquire(ctx, m, o, kind)
	if err != nil {
		return nil, nil, errors.Join(err, sd.Remove())
	}
	return &Lease{Chain: ch, Dir: sd.Path, sd: sd}, ch.Context(), nil
}

// Close closes the chain, then removes the scratch dir.
func (l *Lease) Close() error {
	l.Chain.Close()
	return l.sd.Remove()
}
