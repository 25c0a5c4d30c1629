// Package qemu implements vmm.Machine on QEMU (TCG, or KVM where the host has
// hardware virtualization) driven over QMP with our own small client.
//
// Layout of one machine: guest RAM is a memory-backend-file in /dev/shm that
// the host maps too (to hash it and, in the devices-only restore mode, to put
// changed pages back); each lane's disk is an overlay.Device exported over NBD
// on a unix socket, so every sector the guest reads or writes passes through
// the host; the agent channel is the guest's second UART (ttyS1) on a unix
// socket; the console is ttyS0 on QEMU's stdout; CPU and device state go into
// internal snapshots of a small scratch qcow2 node that names no guest disk.
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
