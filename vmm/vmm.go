package vmm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/nbd"
	"github.com/themisfs/themis/overlay"
	"go.uber.org/zap"
)

// Sentinel errors shared by all backends.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("vmm: machine closed")
	// ErrUnknownCheckpoint is returned by Restore for an id that is not on the current path.
	ErrUnknownCheckpoint = errors.New("vmm: checkpoint not on the current path")
	// ErrGuestDied is wrapped when the guest (or its emulator process) went away.
	ErrGuestDied = errors.New("vmm: guest died")
	// ErrVerify is wrapped when a verified restore found RAM or disk different from the checkpoint.
	ErrVerify = errors.New("vmm: restore verification failed")
	// ErrBroken is wrapped by the error of a Checkpoint, Restore or Delete
	// that failed half-way, and by every later call but Close: memory,
	// devices and disks may no longer belong to one checkpoint, so the
	// machine is unusable. It wraps ErrGuestDied: callers that give up on a
	// dead guest give up on a broken machine too.
	ErrBroken = fmt.Errorf("vmm: machine broken by a failed checkpoint operation (%w)", ErrGuestDied)
	// ErrNoRAM is wrapped by Start when the host cannot give the guest its
	// RAM (QEMU: the scratch dir's tmpfs has less room than Config.MemoryMiB);
	// the message names where and how much was free. Nothing else is hurt:
	// it is a refusal of this machine, like a limit.
	ErrNoRAM = errors.New("vmm: no room for guest RAM")
	// ErrCorrupt is wrapped by a Restore or Checkpoint refused because the
	// saved state it would read or add to failed its checksum (changed
	// behind the backend's back: a bit flip, a truncation). Nothing was
	// changed: the guest runs on as it was; later checkpoint operations on
	// that state are refused the same way.
	ErrCorrupt = errors.New("vmm: saved checkpoint state failed its checksum")
)

// DefaultMemoryMiB is guest RAM, in MiB, when Config.MemoryMiB is 0.
const DefaultMemoryMiB = 128

// Backend names: the two Machine implementations, vmm/qemu and vmm/kvm
// (launch.QEMU and launch.KVM are these).
const (
	BackendQEMU = "qemu"
	BackendKVM  = "kvm"
)

// CheckpointID names a checkpoint of one machine. IDs are never reused.
type CheckpointID uint64

// RestoreMode selects how a backend restores memory.
type RestoreMode string

const (
	// RestoreFull saves and loads all guest RAM with the device state (simple, O(RAM) I/O).
	RestoreFull RestoreMode = "full"
	// RestoreDevices saves device and CPU state only; the host puts back the RAM pages
	// that changed since the checkpoint before loading it.
	RestoreDevices RestoreMode = "devices"
)

// AgentChannel selects the device that carries the agent channel between
// the host and the guest agent. The agent finds it on its own: the virtio
// port named agent.PortName where the machine has one, else the UART.
type AgentChannel string

const (
	// AgentVirtio is a virtio port named agent.PortName (the guest's
	// /dev/vportNpM; virtio-serial on QEMU, the agent console on KVM): the
	// host's bytes arrive in page-sized buffers, with no UART FIFO pacing
	// them, and on KVM a message costs a few exits, not three per byte.
	AgentVirtio AgentChannel = "virtio"
	// AgentUART is the guest's second 16550 UART (/dev/ttyS1, 115200 baud).
	AgentUART AgentChannel = "uart"
)

// Disk is one lane's block device.
type Disk struct {
	// Serial identifies the disk inside the guest (/sys/block/*/serial);
	// the agent mounts "serial:<Serial>".
	Serial string
	// Device is the copy-on-write overlay serving every sector the guest reads or writes.
	Device *overlay.Device
}

// Config describes a machine to start.
type Config struct {
	// Kernel and Initramfs are paths to the guest kernel and the agent initramfs.
	Kernel, Initramfs string
	// MemoryMiB is guest RAM in MiB (default DefaultMemoryMiB).
	MemoryMiB int
	// Disks are attached in order as virtio-blk devices.
	Disks []Disk
	// Cmdline is appended to the backend's kernel command line (after
	// FailFastCmdline).
	Cmdline string
	// WarnNotFatal lets the guest kernel go on after a WARN
	// (panic_on_warn=0). By default a WARN ends the guest as an Oops does
	// (FailFastCmdline): a finding at once, with its report on the
	// console.
	WarnNotFatal bool
	// Restore selects the memory restore strategy (default RestoreDevices where supported).
	Restore RestoreMode
	// Verify makes every Restore re-hash guest RAM and every disk and compare with
	// the hashes taken at the checkpoint (the pre-hash = post-hash gate).
	Verify bool
	// AgentChannel selects the agent channel's device ("": AgentVirtio on
	// both backends; KVM keeps the UART when the guest does not open the
	// port). AgentUART offers the guest no virtio port.
	AgentChannel AgentChannel
	// ICount runs the guest under QEMU TCG's instruction counting
	// (-icount shift=0,sleep=off): guest time follows the instructions
	// executed, not the host clock. QEMU only; the KVM backend refuses it.
	ICount bool
	// BootTimeout bounds boot to agent-ready (default 60 s).
	BootTimeout time.Duration
	// Console receives the guest's serial console output (nil: discarded, last lines kept for errors).
	Console io.Writer
	// WorkDir holds sockets and scratch files (default: a new temp dir, removed by Close).
	WorkDir string
	// Log is the logger (nil: no logging).
	Log *zap.Logger
}

// Machine is one running guest.
type Machine interface {
	// Call sends one request to the agent and waits for its response.
	Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error)
	// Checkpoint saves the whole machine and pushes an overlay layer on every disk.
	Checkpoint(ctx context.Context) (CheckpointID, error)
	// Restore returns the machine to a checkpoint on the current path and drops
	// the checkpoints above it. The checkpoint itself stays and can be restored again.
	Restore(ctx context.Context, id CheckpointID) error
	// Delete removes a checkpoint anywhere on the current path; the checkpoints
	// around it stay restorable (its disk layer and memory delta are merged
	// into its neighbours). The running state is unchanged.
	Delete(ctx context.Context, id CheckpointID) error
	// Checkpoints lists the current path, oldest first.
	Checkpoints() []CheckpointID
	// Disks returns the machine's disks in attach order.
	Disks() []Disk
	// Close stops the guest and releases every process, fd, mapping and socket. Idempotent.
	Close() error
}

// CheckpointMemory is implemented by backends that keep host memory for
// their checkpoints beyond guest RAM and the disks' overlays.
type CheckpointMemory interface {
	// CheckpointBytes is how many bytes the checkpoints hold now: the RAM
	// shadow, the undo pages, saved states. Counted as allocated, so an
	// upper bound where the kernel has not populated all of it.
	CheckpointBytes() int64
}

// Hasher is implemented by backends that can hash all guest RAM.
type Hasher interface {
	// RAMHash returns the blake3-256 of all guest RAM; the machine is paused while hashing.
	RAMHash(ctx context.Context) ([32]byte, error)
}

// DiskCounter is implemented by backends that count the requests the guest
// sends its disks (QEMU: the NBD server of each overlay).
type DiskCounter interface {
	// DiskCounts returns, per disk in attach order, what the guest has
	// asked of it since boot. Cheap (atomic loads): callers may take it
	// around every step.
	DiskCounts() []nbd.Counts
}

// Timings is implemented by backends that record how long their last operations took.
type Timings interface {
	// Timings returns the durations of boot, the last checkpoint and the last restore.
	Timings() TimingInfo
}

// TimingInfo holds backend timings.
type TimingInfo struct {
	Boot, Checkpoint, Restore time.Duration
	// RestoreRAM is the part of the last restore spent putting RAM back on the
	// host (devices-only mode), and RestorePages the number of pages copied.
	RestoreRAM   time.Duration
	RestorePages int
}
