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
// A checkpoint stops the VM (which drains block I/O), pushes a layer on every
// overlay, saves CPU+device state (and RAM, in RestoreFull mode) with
// snapshot-save, records the RAM delta against its parent (RestoreDevices
// mode), and resumes. A restore stops the VM, pops the overlays back to the
// checkpoint's depth and pushes a fresh layer, puts RAM back (RestoreDevices),
// loads the state with snapshot-load and resumes. Memory depth and overlay
// depth are asserted equal.
//
// Every child process, socket, mapping and file is owned by the Machine and
// released by Close.
package qemu
