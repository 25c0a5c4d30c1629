// Package crashcheck checks the disks a power cut could leave while a
// trace runs: in a session of its own it runs the setup ops and a sync,
// checkpoints, starts a write log on every lane's disk
// (overlay.Device.StartLog), runs the trace, and then, per lane, lists the
// crash states of the log (package crash) and checks each one: mounted in
// the guest on a spare disk (the kernel's journal or log replay), read for
// what the trace's last fsync made durable, unmounted, then the
// filesystem's read-only fsck on the host (hostfsck, sandboxed); or,
// with HostReplay, on the host alone. A state fsck calls dirty or cannot
// read, or that lost what was made durable, is a crash finding.
//
// A state whose check kills the guest (its kernel crashes mounting or
// reading it, or it stops answering) gets that death as its verdict
// (KernelCrash with the kernel's report, Hung, Died; package relay) and a
// crash finding of its own; the run goes on in a fresh session, where the
// setup and the trace run again, and the lane's later states are checked
// there when its write log has the same shape (else they are counted as
// skipped, and the summary says why).
package crashcheck
