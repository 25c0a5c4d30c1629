// Package crashcheck checks the disks a power cut could leave while a
// trace runs: in a session of its own it runs the setup ops and a sync,
// checkpoints, starts a write log on every lane's disk
// (overlay.Device.StartLog), runs the trace, and then, per lane, lists the
// crash states of the log (package crash) and checks each one on the host:
// the crash view written to a scratch file, the journal replayed there as
// a mount would (ext3/4: e2fsck -E journal_only; no step for filesystems
// whose log only a mount replays), then the filesystem's read-only fsck
// (runs/hostfsck, sandboxed). A state fsck calls dirty or cannot read is
// a crash finding.
//
// Partial: the oracles of durability (what an fsync made durable is
// there) and of atomicity (the state is one the run saw at an op
// boundary) need the crash state mounted in the guest, not yet done; so do
// filesystems the host cannot replay (xfs refuses a dirty log).
package crashcheck
