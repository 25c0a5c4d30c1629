package kvm

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm/devices"
)

// A bare machine is the Linux machine's devices (the PIC, the UARTs, the
// RTC, the agent console on PCI, cfg's disks) on a VM with no kernel: a
// synthetic guest program (VM.LoadProgram) drives them. The echo guests
// (package vmm/kvm/echo) measure the agent channel on one; it runs on any
// /dev/kvm, PVM too. Checkpoint, Restore and RAMHash work on it as on a
// booted machine; Call does not (no agent).

// Port is the host end of a guest channel.
type Port interface {
	io.ReadWriter
	// SetDeadline bounds Read and Write (the zero time: no bound).
	SetDeadline(t time.Time) error
}

// NewBare builds a bare machine on a VM of memBytes with cfg's log,
// disks and Verify (every restore re-hashes RAM); nothing runs until
// Resume.
func NewBare(cfg vmm.Config, memBytes int64) (*Machine, error) {
	vm, err := NewVM(VMConfig{MemoryBytes: memBytes, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	m, err := newMachine(cfg, vm)
	if err != nil {
		return nil, errors.Join(err, vm.Close())
	}
	return m, nil
}

// VM is the machine's VM: its RAM, registers and program.
func (m *Machine) VM() *VM { return m.vm }

// COM2 is the host end of COM2 (the agent's UART).
func (m *Machine) COM2() Port { return m.uart }

// AgentPort is the host end of the agent console's port.
func (m *Machine) AgentPort() Port { return m.vport }

// AgentConsole is the agent console device (nil under AgentChannel uart)
// and the base of its I/O BAR.
func (m *Machine) AgentConsole() (*devices.Console, uint16) {
	return m.vcon, uint16(devices.PCIIOBase + m.vconSlot*devices.PCIIOStride)
}

// Resume starts the vCPU (KVM_RUN until Pause or the guest's end); a
// running or dead machine stays as it is.
func (m *Machine) Resume() { m.resume() }

// Dead is why the guest stopped for good, or nil while it can run.
func (m *Machine) Dead() error { return m.deadErr() }

// Stop stops the vCPU and waits until it is out of KVM_RUN, its state
// consistent (Resume starts it again); a vCPU that does not stop within
// ctx is an error and the guest is dead.
func (m *Machine) Stop(ctx context.Context) error { return m.pause(ctx) }
