// Package bench measures Themis side by side with the Metis-style in-OS
// "remount" baseline: explore throughput for `themisctl bench explore`, and
// restore time for `themisctl bench restore`; and the agent channel on the
// UART beside the virtio-serial port for `themisctl bench channel`, and on /dev/kvm the UART beside the
// virtio console for `themisctl bench echo`.
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
// Restore measures the KVM backend's restore against pages dirtied and RAM
// size with synthetic guests on /dev/kvm (x86asm.DirtyProgram), the arm, and,
// as asked, the QEMU backend's restore of a real guest (booted by
// launch.Boot) and Baseline's cost
// per state, in one call; it fits the KVM points (least squares) against the
// restore target (TargetPerPageNs, TargetFixedNs, TargetRAMRatio). A missed
// target is a result in the report, never an error. The KVM part needs Linux
// and /dev/kvm.
//
// Channel boots two QEMU guests from one image, the agent on the UART in
// one and on the virtio-serial port in the other (vmm.Config.AgentChannel),
// and times the same calls on both, taking turns call by call, after boot
// and right after a restore; it reports medians and the UART / virtio
// ratio per call.
//
// Echo measures the agent channel of the KVM backend side by side: the
// echo guests of echo.Measure (vmm/kvm/echo) over the UART and over the virtio console
// per message size, their exits and time per round trip and the ratios, in
// a kvm-synthetic report. It needs Linux and /dev/kvm.
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
