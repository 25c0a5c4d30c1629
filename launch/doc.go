// Package launch decides which backend boots a guest and assembles guests
// the one way every caller does: base image → overlay per disk → serials →
// start → mount every lane.
//
// Choose is the backend rule, and the only one: from what the host offers
// (Host, read by Probe) and what was asked ("auto", "qemu" or "kvm") it
// returns the backend and why. "auto" is the Go KVM backend where /dev/kvm
// is hardware virtualization, and QEMU (TCG) otherwise; when auto picked
// KVM and the KVM boot fails, Boot falls back to QEMU, logs a warning and
// says so in Guest.Backend and Guest.KVMFailure. A bad value is a
// *FieldError naming the field ("backend").
//
// Boot assembles a guest from a Spec: for every lane a fresh overlay over
// its base image (Spec.MakeBase: baseimage.Make, which launch does not
// import), serial lane<i> (and, for an
// overlay lane, its lower layer's disk, serial lower<i>), one vmm.Config,
// the machine started on the chosen backend (or Spec.Start, a test double
// or a backend under test), and every lane mounted through the agent. The
// returned Guest owns the machine and the overlays: Guest.Close releases
// them all. Boot's context bounds the assembly and the boot, not the
// machine's life. A Guest is not safe for concurrent use; its owner serializes
// calls to the machine.
//
// Users: doctor, bench and the conformance suite (vmm/vmmtest); session's
// Create is to call Choose and Boot the same way. launch must not import
// any of them.
package launch
