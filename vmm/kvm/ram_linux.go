package kvm

import (
	"fmt"

	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm/devices"
)

// RAM is guest memory. Reading it is always fine while the vCPU is stopped;
// the host must write it through WriteRAM, so that checkpoints see the write.
func (m *VM) RAM() []byte { return m.mem }

// WriteRAM copies data into guest RAM at guest-physical addr and marks the
// pages dirty for the next checkpoint or restore (the KVM dirty log sees
// only the guest's writes).
func (m *VM) WriteRAM(addr uint64, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	return m.writeRAM(addr, data)
}

// deviceRAM is guest RAM as the attached devices see it for DMA: every
// range a device takes is marked dirty for the next checkpoint or restore,
// since KVM's dirty log sees only the guest's own writes (the virtio-blk
// used ring and read buffers are written by us). Devices run on the vCPU
// thread inside Run, which holds m.mu, so this takes no lock.
type deviceRAM struct{ m *VM }

var _ devices.Memory = deviceRAM{}

// Slice implements devices.Memory. Ranges the device only reads are marked
// too (the interface does not tell them apart): they cost a page copy at
// restore, never a wrong restore.
func (r deviceRAM) Slice(addr, n uint64) ([]byte, error) {
	b, err := devices.RAM(r.m.mem).Slice(addr, n)
	if err != nil || n == 0 || r.m.tree == nil {
		return b, err
	}
	for p := addr / PageSize; p <= (addr+n-1)/PageSize; p++ {
		r.m.tree.Dirty().Add(int(p))
	}
	return b, nil
}

func (m *VM) writeRAM(addr uint64, data []byte) error {
	if addr > uint64(len(m.mem)) || uint64(len(data)) > uint64(len(m.mem))-addr {
		return fmt.Errorf("kvm: write of %d bytes at %#x is outside guest RAM (%#x bytes)", len(data), addr, len(m.mem))
	}
	copy(m.mem[addr:], data)
	if m.tree != nil && len(data) > 0 {
		for p := addr / PageSize; p <= (addr+uint64(len(data))-1)/PageSize; p++ {
			m.tree.Dirty().Add(int(p))
		}
	}
	return nil
}

// LoadProgram copies code to CodeAddr and resets the general registers:
// RIP=CodeAddr, RSP=StackTop. Segment and control registers are left as they
// are (long mode after New).
func (m *VM) LoadProgram(code []byte) error {
	if len(code) > MaxCode {
		return fmt.Errorf("kvm: program of %d bytes, at most %d", len(code), MaxCode)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	if err := m.writeRAM(CodeAddr, code); err != nil {
		return err
	}
	return m.SetRegs(Regs{RIP: CodeAddr, RSP: StackTop, RFLAGS: 2})
}

// Scratch returns the scratch device's state.
func (m *VM) Scratch() ScratchState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scratch
}
