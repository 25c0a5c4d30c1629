package session

import (
	"context"
	"time"
)

// Pruned counts what a Prune deleted.
type Pruned struct {
	Sessions int64 // ended or failed sessions (with their checkpoints)
	Events   int64
}

// Prune deletes from the ledger the sessions that ended or failed before
// cutoff, with their checkpoints and events, and every event older than
// cutoff. Running sessions and findings stay (a finding keeps its lane
// specs and trace, all a replay needs; Findings of a pruned session's id
// is then errkind.ErrNotFound, and ListFindings with no session lists it).
func (m *Manager) Prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	return m.ledger.prune(ctx, cutoff)
}
