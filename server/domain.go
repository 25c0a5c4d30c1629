package server

import (
	"context"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/runs/belowfs"
	"github.com/themisfs/themis/runs/check"
	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/runs/export"
	"github.com/themisfs/themis/session"
)

// Sessions is what the session adapters call: exactly the methods of
// *session.Manager the API needs.
type Sessions interface {
	Create(ctx context.Context, o session.CreateOptions) (*session.Info, error)
	Get(ctx context.Context, id string) (*session.Info, error)
	List(ctx context.Context, all bool) ([]*session.Info, error)
	ListPage(ctx context.Context, all bool, after session.PageKey, limit int) ([]*session.Info, error)
	Delete(ctx context.Context, id string) error

	Fork(ctx context.Context, sessionID, name string, origin session.Origin) (*session.Checkpoint, error)
	Restore(ctx context.Context, sessionID, checkpoint string) (*session.Checkpoint, time.Duration, error)
	Checkpoints(ctx context.Context, sessionID string, all bool) ([]*session.Checkpoint, error)
	DeleteCheckpoint(ctx context.Context, sessionID, checkpoint string) error

	Apply(ctx context.Context, sessionID string, op *agentv1.Request) ([]session.LaneResult, error)
	Fingerprint(ctx context.Context, sessionID string, mode agentv1.TimeMode, leaves bool, lanes []string) ([]session.LaneFingerprint, error)
	Hashes(ctx context.Context, sessionID string) (session.Hashes, error)
	Stat(ctx context.Context, sessionID, lane, path string, follow bool) (*agentv1.StatResult, session.LaneResult, error)
	ReadFile(ctx context.Context, sessionID, lane, path string, off, length int64) ([]byte, bool, session.LaneResult, error)
	RestoreFile(ctx context.Context, sessionID, checkpoint, lane, path string) (removed bool, size int64, err error)

	Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]session.Event, error)
	Findings(ctx context.Context, sessionID string) ([]session.Finding, error)
	FindingsPage(ctx context.Context, sessionID string, after session.PageKey, limit int) ([]session.Finding, error)
	Finding(ctx context.Context, id string) (*session.Finding, error)
	SetFindingStatus(ctx context.Context, id, status string) (*session.Finding, error)
}

// Runs is what the run adapters call: the experiments over sessions
// (runs/...), each in a session of its own.
type Runs interface {
	Explore(ctx context.Context, o exploration.Options, progress func(exploration.Progress), found func(session.Finding)) (*exploration.Summary, error)
	ClockSweep(ctx context.Context, o clocksweep.Options, cell func(clocksweep.Cell)) (*clocksweep.Summary, error)
	Profile(ctx context.Context, o belowfs.ProfileOptions, row func(belowfs.ProfileRow)) (*belowfs.ProfileSummary, error)
	Corrupt(ctx context.Context, o belowfs.CorruptOptions, res func(belowfs.CorruptResult)) (*belowfs.CorruptSummary, error)
	Diff(ctx context.Context, a, b session.DiffSide, normalize bool) (*fsimage.DiffResult, error)
	Crash(ctx context.Context, o crashcheck.Options, out crashcheck.Sinks) (*crashcheck.Summary, error)
	Check(ctx context.Context, o check.Options, out check.Sinks) (*check.Summary, error)
	// ExploreRecord is what a finished explore run of session id kept.
	ExploreRecord(ctx context.Context, id string) (*exploration.Record, error)
	// Replay runs finding f again in a session of its own.
	Replay(ctx context.Context, f *session.Finding, on exploration.ReplayOn) (*exploration.Replayed, error)
	// ReplayPasses measures replay fidelity.
	ReplayPasses(ctx context.Context, o exploration.PassesOptions, progress func(exploration.PassProgress)) (*exploration.PassesResult, error)
	// Footprint profiles finding f's last op below the filesystem.
	Footprint(ctx context.Context, f *session.Finding, lanes []string, memoryMiB int) (*belowfs.Footprint, error)
	// Export builds finding f's reproducer.
	Export(ctx context.Context, f *session.Finding, o export.Options, out export.Sinks) (*export.Summary, error)
	// Bisect replays finding f on images in order.
	Bisect(ctx context.Context, f *session.Finding, images []string) (*exploration.Bisected, error)
}

// Domain is what the adapters call, so tests can substitute a fake. It
// must be safe for concurrent use.
type Domain interface {
	Sessions
	Runs
}

// managedDomain is the package's short name for ManagedDomain.
type managedDomain = ManagedDomain

// ManagedDomain is a Domain the daemon owns: Shutdown closes it.
type ManagedDomain interface {
	Domain
	Close() error
}

// NewDomain is the Domain over m: its sessions, and the runs over them.
// Closing it closes m.
func NewDomain(m *session.Manager) ManagedDomain { return managerDomain{Manager: m} }

// managerDomain serves Sessions from the Manager and Runs from the run
// packages over it.
type managerDomain struct{ *session.Manager }

var _ managedDomain = managerDomain{}

// Crash implements Runs.
func (d managerDomain) Crash(ctx context.Context, o crashcheck.Options, out crashcheck.Sinks) (*crashcheck.Summary, error) {
	return crashcheck.Run(ctx, d.Manager, o, out)
}

// Check implements Runs.
func (d managerDomain) Check(ctx context.Context, o check.Options, out check.Sinks) (*check.Summary, error) {
	return check.Run(ctx, d.Manager, o, out)
}

// ExploreRecord implements Runs.
func (d managerDomain) ExploreRecord(ctx context.Context, id string) (*exploration.Record, error) {
	return exploration.LoadRecord(ctx, d.Manager, id)
}

// Replay implements Runs.
func (d managerDomain) Replay(ctx context.Context, f *session.Finding, on exploration.ReplayOn) (*exploration.Replayed, error) {
	return exploration.Replay(ctx, d.Manager, f, on)
}

// ReplayPasses implements Runs.
func (d managerDomain) ReplayPasses(ctx context.Context, o exploration.PassesOptions, progress func(exploration.PassProgress)) (*exploration.PassesResult, error) {
	return exploration.Passes(ctx, d.Manager, o, progress)
}

// Footprint implements Runs.
func (d managerDomain) Footprint(ctx context.Context, f *session.Finding, lanes []string, memoryMiB int) (*belowfs.Footprint, error) {
	return belowfs.FootprintOf(ctx, d.Manager, f, lanes, memoryMiB)
}

// Export implements Runs.
func (d managerDomain) Export(ctx context.Context, f *session.Finding, o export.Options, out export.Sinks) (*export.Summary, error) {
	return export.Run(ctx, d.Manager, f, o, out)
}

// Bisect implements Runs.
func (d managerDomain) Bisect(ctx context.Context, f *session.Finding, images []string) (*exploration.Bisected, error) {
	return exploration.Bisect(ctx, d.Manager, f, images)
}

// Explore implements Runs.
func (d managerDomain) Explore(ctx context.Context, o exploration.Options, progress func(exploration.Progress), found func(session.Finding)) (*exploration.Summary, error) {
	return exploration.Run(ctx, d.Manager, o, progress, found)
}

// ClockSweep implements Runs.
func (d managerDomain) ClockSweep(ctx context.Context, o clocksweep.Options, cell func(clocksweep.Cell)) (*clocksweep.Summary, error) {
	return clocksweep.Run(ctx, d.Manager, o, cell)
}

// Profile implements Runs.
func (d managerDomain) Profile(ctx context.Context, o belowfs.ProfileOptions, row func(belowfs.ProfileRow)) (*belowfs.ProfileSummary, error) {
	return belowfs.Profile(ctx, d.Manager, o, row)
}

// Corrupt implements Runs.
func (d managerDomain) Corrupt(ctx context.Context, o belowfs.CorruptOptions, res func(belowfs.CorruptResult)) (*belowfs.CorruptSummary, error) {
	return belowfs.Corrupt(ctx, d.Manager, o, res)
}

// Diff implements Runs.
func (d managerDomain) Diff(ctx context.Context, a, b session.DiffSide, normalize bool) (*fsimage.DiffResult, error) {
	return diffDisks(ctx, d.Manager, a, b, normalize)
}
