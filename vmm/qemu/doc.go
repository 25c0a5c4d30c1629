// Package qemu implements vmm.Machine on QEMU (TCG, or KVM where the host has
// hardware virtualization) driven over QMP with our own small client.
//
// Layout of one machine: guest RAM is a memory-backend-file in ScratchDir
// (/dev/shm, or $THEMIS_SCRATCH_DIR: ScratchEnv) that the host maps too
// (to hash it and, in the devices-only restore mode, to put changed pages
// back), beside the machine's work dir (its sockets and state image);
// each lane's disk is an overlay.Device exported over NBD
// on a unix socket, so every sector the guest reads or writes passes through
// the host; the agent channel is a unix socket chardev on a virtio-serial
// port named themis.agent (agent.PortName; virtio-serial-pci with
// max_ports=2), or with vmm.Config.AgentChannel "uart" on the guest's second
// UART (ttyS1); the console is ttyS0 on QEMU's stdout, where the agent's
// ready line names the device it serves on (Machine.AgentPath); CPU and
// device state go into internal snapshots of a small scratch qcow2 node that
// names no guest disk.
//
// The RAM file is allocated in full (fallocate) before QEMU starts: a
// tmpfs without room for it refuses the boot with an error wrapping
// vmm.ErrNoRAM that names the dir and its free space, where a sparse file
// would have raised SIGBUS at the first page the tmpfs could not back.
// The host's own accesses to the mapping (the page scan, the RAM deltas'
// copies, the RAM hash) run under internal/memguard: should the file still
// lose pages, that machine is broken (vmm.ErrBroken, wrapping
// memguard.ErrFault) and the daemon lives on.
//
// The agent channel survives snapshot-load: the chardev's socket stays
// connected (the host listens, QEMU connected once at start), and the
// virtio-serial device's saved state (guest-connected, the rings, RAM put
// back first) matches the guest's, while its host-connected side is the
// live one, unchanged. Checkpoints are taken only when the agent has
// replied, so no frame is in flight in either direction.
//
// Checkpoints go through the path both backends share (vmm/checkpoint),
// which stops the VM (QMP stop drains block I/O), pushes, pops and merges
// the overlays, asserts the lockstep and runs the verify gate. This package
// supplies the memory part: snapshot-save / snapshot-load / snapshot-delete
// of CPU and device state (and RAM, in RestoreFull mode) into the scratch
// node, and in RestoreDevices mode the RAM deltas: a fork.Tree over the
// mapped RAM, fed with the pages a scan of page digests finds changed (TCG
// has no dirty log). RAM goes back before snapshot-load. Snapshots dropped
// by a restore are deleted at the next checkpoint.
//
// Every child process, socket, mapping and file is owned by the Machine and
// released by Close.
package qemu
