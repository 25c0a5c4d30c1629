// Package exploration is the explore run: it leases a session
// (session.Manager.Acquire) and drives explore.Checker over it.
//
// The run's system implements explore.System directly on the session's
// machine — Checkpoint, Restore and Drop are vmm Checkpoint, Restore and
// Delete, Apply is one agent call per lane — with no pools and no ledger
// event per op; fingerprints are folded on the host under the run's
// oracle.Policy. While the run lasts the session is busy (the other session
// methods refuse it with ErrState); it ends with the run. Findings are
// stored in the ledger's findings table with a "finding" event, their
// traces in opspec short form (FormatTrace). Single-lane runs may add the
// remount and host fsck self-references (KindRemount, KindFsck); every
// overlay lane is checked against lower ⊕ upper seen from below
// (oracle.Merge, KindLayers).
package exploration
