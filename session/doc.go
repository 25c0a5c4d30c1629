// Package session is the daemon's core: it owns running sessions (one guest
// machine per session, one copy-on-write overlay per lane over a base image),
// their checkpoint pools, and the ledger that records everything durably.
//
// # Model
//
// A session boots a guest (vmm.Machine) with disk i serving lane i (serial
// "lane<i>") and mounts every lane at /lanes/<name>. Operations (Apply) run on
// every lane and return each lane's errno. Fork checkpoints the whole machine;
// checkpoints are "c-<n>" per session, each with the fingerprint root of every
// lane (TIME_MODE_ALL). Live checkpoints are exactly those on the machine's
// current path: a Restore drops the ones above its target, DeleteCheckpoint
// (vmm Machine.Delete) removes one anywhere on the path.
//
// Two pools per session: manual (limited, errkind.ErrExhausted when full) and auto (a
// ring; the oldest live auto checkpoint is evicted). Fork keeps the content
// of each lane's regular files (content-addressed, only what is new, read
// through the guest and checked against the fingerprint) so that RestoreFile
// can put one file back as at a checkpoint without touching the rest of the
// running state. Keeping reads a changed file once, which may update its
// atime under relatime; the checkpoint's roots are taken after those reads.
//
// # Runs
//
// An experiment (runs/exploration, runs/clocksweep, runs/belowfs) leases a
// session of its own: Acquire creates it and marks it busy (the other
// methods refuse it with errkind.ErrState while the run lasts); the Run's Do, Call,
// Apply, Checkpoint, Restore and Disk use its machine under the session's
// lock with a per-call bound (RunCallTimeout; a dead or silent guest wraps
// ErrGuestGone), Event and RecordFinding write the ledger, and End (or
// Finish, with a reason from the run's error) ends the session, once. Runs
// take no pool and record no event per op. Views resolves two lanes' disks
// at checkpoints for the Diff RPC (server/diff.go). session imports none of the runs nor
// what only they need (explore, opspec, clock, grpc): internal/arch holds
// it to that.
//
// # Ledger
//
// StateDir/ledger.db is SQLite (modernc.org/sqlite, WAL, busy timeout) with
// embedded migrations applied by PRAGMA user_version: sessions, checkpoints,
// events, findings (recorded by explore runs, listed by Findings). Every state change records an event. Open marks sessions a
// previous daemon left running as ended ("daemon restarted"). The lists
// page in SQL by a (created, id) keyset on an index (migration 0004); a
// session keeps its newest MaxSessionEvents events.
//
// # Errors
//
// Bad input is a errkind.FieldError (errkind.ErrInvalid) naming the request field; unknown
// sessions and checkpoints are errkind.ErrNotFound; a session that is not running or
// a checkpoint not on the current path is errkind.ErrState; limits are errkind.ErrExhausted.
// A machine error wrapping vmm.ErrGuestDied (or a broken agent channel) marks
// the session failed and closes its machine; a guest never panics the Manager.
// A failing system call in the guest is a result (LaneResult.Errno), not an error.
//
// # Concurrency
//
// Manager.mu guards the session map and the capacity accounting; each
// session's mu serializes all use of its machine (a caller waits for it
// until its context ends). Every unlock publishes an immutable copy of the
// session's metadata (Info, checkpoints, run): Get, List and Checkpoints
// read that copy and never wait on a busy or stuck guest. Create reserves
// capacity under Manager.mu and boots outside it. Lock order: session.mu,
// then Manager.mu.
//
// # A stuck guest
//
// Every guest call of the session methods (agent call, checkpoint,
// restore, checkpoint delete) runs under the caller's deadline capped by
// Config.CallTimeout (default 60 s). A call past the cap, with the caller's
// context still live, wraps ErrUnresponsive (and context.DeadlineExceeded)
// and marks the session StateUnresponsive (event "session.unresponsive");
// the next answered call makes it running again (on QEMU and KVM the agent
// client breaks on a timed-out call, so there the next call fails the
// session instead: agent.ErrBroken). Delete (and Close) end a
// session bounded: they wait a second for its lock, then kill the machine
// (Kill where the backend has it, qemu.Machine's; else Close) so that the
// call in flight fails, wait a second more, and otherwise give up on the
// holder (abandon: the slot and the ledger are released at once, the
// machine's resources when the stuck call returns).
//
// # Budgets
//
// Guest RAM is bounded by Config.MaxMemoryMiB, and on QEMU by the room of
// the scratch dir's tmpfs (qemu.ScratchDir), where it lives: a boot the
// host has no room for (vmm.ErrNoRAM) fails that Create with errkind.ErrExhausted,
// naming the dir and its free space, and Open warns when the dir cannot
// hold MaxMemoryMiB (or one guest of vmm.DefaultMemoryMiB) of guest RAM.
// What a session keeps beside
// it, in the daemon's heap and tmpfs, is bounded by its budget
// (Config.SessionBudget, internal/budget) under the daemon's
// (Config.DaemonBudget): the sectors its overlays hold (billed by the
// overlays themselves, overlay.SectorCost each, in every layer), the file
// content Fork keeps (refused: the file is not kept, as past the caps) and
// its machine's checkpoint memory (vmm.CheckpointMemory, read after each
// checkpoint, restore and delete). A write the overlay refuses reaches the
// guest as an I/O error, so its filesystems no longer model anything: the
// next call on the session fails it (StateFailed) wrapping errkind.ErrExhausted,
// with the refusal naming the budget, the kind, the usage by kind and the
// config key; a run's calls all wrap errkind.ErrExhausted from then on. A fork
// whose checkpoint memory does not fit is deleted again and refused
// (errkind.ErrExhausted); the session goes on. A daemon with less than 1 MiB of
// its budget left refuses Create.
//
// session must not import grpc or Prometheus: the server package adapts it.
package session
