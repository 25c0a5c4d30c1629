package server

import (
	"context"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/session"
)

// Domain is what the adapters call: exactly the methods of *session.Manager
// the API needs, so tests can substitute a fake. It must be safe for
// concurrent use.
type Domain interface {
	Create(ctx context.Context, o session.CreateOptions) (*session.Info, error)
	Get(ctx context.Context, id string) (*session.Info, error)
	List(ctx context.Context, all bool) ([]*session.Info, error)
	Delete(ctx context.Context, id string) error

	Fork(ctx context.Context, sessionID, name string, origin session.Origin) (*session.Checkpoint, error)
	Restore(ctx context.Context, sessionID, checkpoint string) (*session.Checkpoint, time.Duration, error)
	Checkpoints(ctx context.Context, sessionID string, all bool) ([]*session.Checkpoint, error)
	DeleteCheckpoint(ctx context.Context, sessionID, checkpoint string) error

	Apply(ctx context.Context, sessionID string, op *agentv1.Request) ([]session.LaneResult, error)
	Fingerprint(ctx context.Context, sessionID string, mode agentv1.TimeMode, leaves bool, lanes []string) ([]session.LaneFingerprint, error)
	Stat(ctx context.Context, sessionID, lane, path string, follow bool) (*agentv1.StatResult, session.LaneResult, error)
	ReadFile(ctx context.Context, sessionID, lane, path string, off, length int64) ([]byte, bool, session.LaneResult, error)
	RestoreFile(ctx context.Context, sessionID, checkpoint, lane, path string) (removed bool, size int64, err error)

	Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]session.Event, error)

	Explore(ctx context.Context, o session.ExploreOptions, progress func(session.ExploreProgress), found func(session.Finding)) (*session.ExploreSummary, error)
	Findings(ctx context.Context, sessionID string) ([]session.Finding, error)
	Finding(ctx context.Context, id string) (*session.Finding, error)

	ClockSweep(ctx context.Context, o session.SweepOptions, cell func(session.SweepCell)) (*session.SweepSummary, error)
	Profile(ctx context.Context, o session.ProfileOptions, row func(session.ProfileRow)) (*session.ProfileSummary, error)
	Corrupt(ctx context.Context, o session.CorruptOptions, res func(session.CorruptResult)) (*session.CorruptSummary, error)
	Diff(ctx context.Context, a, b session.DiffSide, normalize bool) (*fsimage.DiffResult, error)
}

// managedDomain is the package's short name for ManagedDomain.
type managedDomain = ManagedDomain

// ManagedDomain is a Domain the daemon owns: Shutdown closes it.
type ManagedDomain interface {
	Domain
	Close() error
}

var _ managedDomain = (*session.Manager)(nil)
