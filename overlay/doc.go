// Package overlay implements a copy-on-write block device: an immutable base
// image with a stack of writable layers on top.
//
// # Model
//
// A Device has a fixed size, a multiple of SectorSize (512 bytes). The base is
// any io.ReaderAt (or a file opened read-only by Open) and is never written.
// Above it sits a stack of writable layers; there is always at least one
// (Depth() >= 1). Each layer maps a sector number (LBA, in 512-byte units) to a
// full copy of that sector's contents.
//
// Invariants:
//
//   - Reads resolve every sector top-down: the topmost layer holding the sector
//     serves it; otherwise the base does.
//   - Writes go only into the top layer. A write that covers part of a sector
//     first copies the resolved sector into the top layer (read-modify-write),
//     so a layer always holds whole sectors.
//   - Push adds an empty layer and Pop drops the top layer together with every
//     write made since the matching Push; both are O(1). The bottom writable
//     layer can never be popped (ErrBaseLayer), so the base stays immutable.
//   - The top layer's key set is the write set since the last Push.
//
// # Counters
//
// Each layer (and the base) counts the sectors it served to ReadAt and the
// sectors written into it by WriteAt. Internal reads (the read half of a
// read-modify-write, Hash, WriteTo, Materialize) are not counted. Popping a
// layer drops its counters with it. With TrackReads on, the Device also
// keeps the set of distinct sectors served to ReadAt (ReadSet), emptied by
// ResetCounters and kept across Push and Pop.
//
// # Memory
//
// Every held sector lives in the Go heap, in every layer that holds it.
// SetCharger bills a Charger (a session's budget) SectorCost bytes per held
// sector: a write that needs new sectors is refused whole when the charger
// refuses, a write that fails part way (a base read) gives back what it
// billed for sectors it did not make, and Pop, PopTo, Merge and Close give
// back what they drop.
//
// # Write log and crash views
//
// StartLog, right after a Push, records every write (as whole sectors) and
// every Flush the device receives, in order, until StopLog or any change
// of the layers (Pop, PopTo, Merge: the writes may be undone). While it
// runs, a write never changes a sector in place: it puts a fresh sector in
// the top layer and the log keeps the old one, so each entry's sectors
// stay as that write left them without a copy (the versions only the log
// holds are billed to the charger; at most MaxLogEntries entries, past
// which the log is dropped and says so). CrashView(keep) reads as the
// image at the log's start with the kept writes laid over it in log
// order: the disk a power cut could leave (package crash chooses which).
// A view is valid while its log runs: once the log ends its reads fail
// with ErrNoLog, once it overflows with ErrLogOverflow.
//
// # Concurrency and ownership
//
// All methods are safe for concurrent use; one mutex serializes them, so Hash,
// WriteTo and Materialize see a consistent image and block writers while they
// run. A Device made by Open owns its base file and closes it in Close; a
// Device made by New never closes the io.ReaderAt it was given. Close is
// idempotent; other methods return ErrClosed afterwards.
//
// overlay is a leaf package: it must not import vmm, nbd, grpc or os/exec.
package overlay
