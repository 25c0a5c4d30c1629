// Package checkpoint is the one checkpoint path both VMM backends share.
//
// A Path owns the bookkeeping that does not depend on how a backend saves a
// guest: the record of every checkpoint on the current path (its id, the
// backend's name for its memory state, and with Verify the blake3 of RAM
// and of every disk), the overlay layer every disk gets per checkpoint
// (Push at a checkpoint, PopTo + Push at a restore, Merge at a delete), the
// lockstep assertion (memory depth = overlay depth − base = path length)
// and the verify gate (a restore re-hashes RAM and every disk and compares).
// A backend supplies only its memory and device part through the small
// Memory interface: QEMU saves CPU and device state with snapshot-save and
// RAM deltas through fork.Tree; KVM saves RAM through fork.Tree and vCPU,
// in-kernel and attached device state with ioctls.
//
// # Failure policy
//
// An error before anything changed (an unknown id, a guest that would not
// stop, a Save that failed, a Load refused by the saved state's checksum:
// vmm.ErrCorrupt) leaves the path as it was; the guest runs on
// (a guest that would not stop is the backend's to report: dead, or
// gone). An error after something changed (a failed Load, overlay pop or
// merge, Drop, a hash, the lockstep assertion, the verify gate) breaks the
// path: the guest stays stopped, and that call and every later one return
// an error wrapping vmm.ErrBroken (which wraps vmm.ErrGuestDied) and the
// cause.
// Only Close is left to the caller. Nothing is ever left half-popped and
// running.
//
// Concurrency: a Path is not safe for concurrent use; the backend calls it
// with its machine's lock held. Every Memory method is called with the
// guest stopped, between Stop and Resume (Stop and Resume excepted).
//
// This package may import vmm, never a backend.
package checkpoint
