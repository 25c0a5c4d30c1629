// Package bench measures Themis's explore throughput side by side with the
// Metis-style in-OS "remount" baseline, for `themisctl bench explore`.
//
// Baseline is the O(image) backtracking Metis uses for real filesystems,
// measured on the host: per state, copy the state's image into a work file
// (the restore), loop-mount it, apply one operation with plain syscalls,
// unmount, and copy the whole image back out (the state store, as SPIN keeps
// a full device copy per state). It needs root, /dev/loop-control and the
// host kernel's filesystem driver; without them it returns an error wrapping
// ErrUnavailable that says why.
//
// Explore runs a session.Explore and reduces its summary to a per-state
// split; Compare puts the two side by side. Run does both in one call, on the
// same lane spec (so the same filesystem and image size) and the same op
// kinds.
//
// The baseline times only backtracking and the op: Metis also walks and
// hashes the abstract state per state, which Baseline leaves out, so its
// ms/state is a lower bound on Metis's. Comparison reports the whole
// per-state cost of both and the backtrack part of both.
//
// Concurrency: Baseline mounts under a private temporary directory and may
// run concurrently with itself; Explore serializes on the session's machine.
// The package does no logging; callers print the results.
package bench
