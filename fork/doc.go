// Package fork holds the checkpoint logic shared by the VMM backends: a
// page-delta stack over one guest RAM region (Tree: the KVM backend's RAM
// checkpoints, and the QEMU backend's in its devices-only restore mode),
// the whole-RAM hash both use as the revert proof and in their verify gate
// (Hash), and the on-disk snapshot container (Encode/Decode, used by the
// KVM backend's snapshot files).
//
// # Memory model
//
// A Tree keeps a shadow copy of RAM as it was at the newest checkpoint on the
// path (taken once by Arm: the O(RAM) arm cost, which copies only the
// populated ranges the caller names), an undo log per checkpoint (the pages
// that changed between its parent and itself, with their content at the
// parent), and the set of pages dirtied since the newest checkpoint
// (Tree.Dirty, filled by the caller: on KVM from the dirty bitmap or dirty
// ring, on QEMU from a scan that compares page digests of RAM and shadow;
// Tree.OnShadowWrite reports each shadow page the tree rewrites, so that
// such digests stay true).
//
// Invariants, checked by the tests against a naive full-copy model:
//
//   - every page not in Dirty has the same content in RAM and in the shadow;
//   - the content of page p at checkpoint c is the undo entry of the oldest
//     checkpoint above c whose undo log holds p, or else the shadow's.
//
// Checkpoint costs O(dirty pages); Restore(c) copies back exactly the pages
// dirtied since c (the Dirty set plus the undo logs of the checkpoints it
// drops), each once; Delete merges a checkpoint's undo log into its child's.
// Nothing is O(RAM) after Arm except the bookkeeping arrays (4 bytes per
// page for dedup marks and 1 bit per page for the dirty set).
//
// Ownership and concurrency: a Tree reads and writes the RAM slice it was
// given and the shadow slice; the caller must stop every vCPU while calling
// Checkpoint, Restore and Delete. A Tree is not safe for concurrent use.
//
// Faults: RAM may be a file mapping that can lose pages (QEMU's RAM file
// on a tmpfs), whose access raises SIGBUS. The caller guards its own
// goroutine (internal/memguard); the goroutines Restore starts to copy
// pages back guard themselves, and their fault is Restore's error, wrapping
// memguard.ErrFault. After a fault the Tree is unusable.
//
// This package is pure: no I/O, no clock, and it must not import vmm or any
// backend.
package fork
