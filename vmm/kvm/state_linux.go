package kvm

import (
	"fmt"
)

// vcpuState is the vCPU at a checkpoint.
type vcpuState struct {
	Regs      Regs
	Sregs     Sregs
	FPU       FPU
	XSAVE     XSAVE // valid when the host has KVM_CAP_XSAVE
	XCRS      XCRS  // valid when the host has KVM_CAP_XCRS
	MSRs      []MSR // checkpointMSRs the host has, TSC then TSC_DEADLINE last
	LAPIC     LAPIC // valid with the in-kernel irqchip
	Events    VCPUEvents
	DebugRegs DebugRegs
	MPState   MPState
}

// vmState is the VM-wide in-kernel device state at a checkpoint (valid with
// the in-kernel irqchip).
type vmState struct {
	PICMaster, PICSlave, IOAPIC IRQChip
	PIT                         PITState2
	Clock                       ClockData // valid when the host has KVM_CAP_ADJUST_CLOCK
}

// Regs returns the vCPU's general registers (KVM_GET_REGS).
func (m *VM) Regs() (Regs, error) {
	var r Regs
	_, err := ioctlPtr(m.vcpuFD, "KVM_GET_REGS", kvmGetRegs, &r)
	return r, err
}

// SetRegs sets the vCPU's general registers (KVM_SET_REGS).
func (m *VM) SetRegs(r Regs) error {
	_, err := ioctlPtr(m.vcpuFD, "KVM_SET_REGS", kvmSetRegs, &r)
	return err
}

// Sregs returns the vCPU's segment and control registers (KVM_GET_SREGS).
func (m *VM) Sregs() (Sregs, error) {
	var s Sregs
	_, err := ioctlPtr(m.vcpuFD, "KVM_GET_SREGS", kvmGetSregs, &s)
	return s, err
}

// SetSregs sets the vCPU's segment and control registers (KVM_SET_SREGS).
func (m *VM) SetSregs(s Sregs) error {
	_, err := ioctlPtr(m.vcpuFD, "KVM_SET_SREGS", kvmSetSregs, &s)
	return err
}

// XSAVE returns the vCPU's extended state (KVM_GET_XSAVE).
func (m *VM) XSAVE() (*XSAVE, error) {
	x := new(XSAVE)
	_, err := ioctlPtr(m.vcpuFD, "KVM_GET_XSAVE", kvmGetXSAVE, x)
	return x, err
}

// SetXSAVE sets the vCPU's extended state (KVM_SET_XSAVE).
func (m *VM) SetXSAVE(x *XSAVE) error {
	_, err := ioctlPtr(m.vcpuFD, "KVM_SET_XSAVE", kvmSetXSAVE, x)
	return err
}

func (m *VM) irqchip() bool { return !m.cfg.NoIRQChip }

func (m *VM) saveVCPU() (vcpuState, error) {
	var s vcpuState
	var err error
	if s.Regs, err = m.Regs(); err != nil {
		return s, err
	}
	if s.Sregs, err = m.Sregs(); err != nil {
		return s, err
	}
	if _, err = ioctlPtr(m.vcpuFD, "KVM_GET_FPU", kvmGetFPU, &s.FPU); err != nil {
		return s, err
	}
	if m.hasXSAVE {
		if _, err = ioctlPtr(m.vcpuFD, "KVM_GET_XSAVE", kvmGetXSAVE, &s.XSAVE); err != nil {
			return s, err
		}
	}
	if m.hasXCRS {
		if _, err = ioctlPtr(m.vcpuFD, "KVM_GET_XCRS", kvmGetXCRS, &s.XCRS); err != nil {
			return s, err
		}
	}
	if s.MSRs, err = m.getMSRs(); err != nil {
		return s, err
	}
	if m.irqchip() {
		if _, err = ioctlPtr(m.vcpuFD, "KVM_GET_LAPIC", kvmGetLAPIC, &s.LAPIC); err != nil {
			return s, err
		}
	}
	if _, err = ioctlPtr(m.vcpuFD, "KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents, &s.Events); err != nil {
		return s, err
	}
	if _, err = ioctlPtr(m.vcpuFD, "KVM_GET_DEBUGREGS", kvmGetDebugRegs, &s.DebugRegs); err != nil {
		return s, err
	}
	_, err = ioctlPtr(m.vcpuFD, "KVM_GET_MP_STATE", kvmGetMPState, &s.MPState)
	return s, err
}

// loadVCPU sets the state back in QEMU's order: registers, FPU/XSAVE,
// sregs (before the LAPIC: APIC base), MSRs (TSC, then TSC_DEADLINE), MP state, LAPIC,
// events, debug registers.
func (m *VM) loadVCPU(s *vcpuState) error {
	if err := m.SetRegs(s.Regs); err != nil {
		return err
	}
	if _, err := ioctlPtr(m.vcpuFD, "KVM_SET_FPU", kvmSetFPU, &s.FPU); err != nil {
		return err
	}
	if m.hasXSAVE {
		if _, err := ioctlPtr(m.vcpuFD, "KVM_SET_XSAVE", kvmSetXSAVE, &s.XSAVE); err != nil {
			return err
		}
	}
	if m.hasXCRS {
		if _, err := ioctlPtr(m.vcpuFD, "KVM_SET_XCRS", kvmSetXCRS, &s.XCRS); err != nil {
			return err
		}
	}
	if err := m.setSregsFlushingTLB(s.Sregs); err != nil {
		return err
	}
	msrs, deadline := splitTSCDeadline(s.MSRs)
	if err := m.setMSRs(msrs); err != nil {
		return err
	}
	if _, err := ioctlPtr(m.vcpuFD, "KVM_SET_MP_STATE", kvmSetMPState, &s.MPState); err != nil {
		return err
	}
	if m.irqchip() {
		if _, err := ioctlPtr(m.vcpuFD, "KVM_SET_LAPIC", kvmSetLAPIC, &s.LAPIC); err != nil {
			return err
		}
	}
	// The deadline arms the LAPIC timer only once the LAPIC is in
	// TSC-deadline mode, against the TSC set above (QEMU's order too).
	if err := m.setMSRs(deadline); err != nil {
		return err
	}
	if _, err := ioctlPtr(m.vcpuFD, "KVM_SET_VCPU_EVENTS", kvmSetVCPUEvents, &s.Events); err != nil {
		return err
	}
	_, err := ioctlPtr(m.vcpuFD, "KVM_SET_DEBUGREGS", kvmSetDebugRegs, &s.DebugRegs)
	return err
}

// msrTSCDeadline is IA32_TSC_DEADLINE.
const msrTSCDeadline = 0x6e0

// splitTSCDeadline returns list without the TSC deadline, and the deadline alone.
func splitTSCDeadline(list []MSR) (rest, deadline []MSR) {
	for _, e := range list {
		if e.Index == msrTSCDeadline {
			deadline = append(deadline, e)
		} else {
			rest = append(rest, e)
		}
	}
	return rest, deadline
}

// setSregsFlushingTLB sets s after setting it once with another CR3: a
// changed CR3 makes KVM reset the vCPU's MMU context, which flushes the
// guest's TLB at the next entry. A restore rewrites page tables beneath
// the guest, and on hardware virtualization translations cached since the
// checkpoint (tagged by the guest's ASID/VPID, not flushed by an exit)
// would otherwise outlive it. (Emulated AMD-V flushes on every world
// switch and PVM shadows page tables, so TestRestoreFlushesGuestTLB passes
// there either way.)
func (m *VM) setSregsFlushingTLB(s Sregs) error {
	if s.CR0&(1<<31) != 0 { // paging on
		other := s
		other.CR3 ^= 0x1000
		if err := m.SetSregs(other); err != nil {
			return err
		}
	}
	return m.SetSregs(s)
}

func (m *VM) getMSRs() ([]MSR, error) {
	var b msrs
	b.N = uint32(len(m.msrIndices))
	for i, idx := range m.msrIndices {
		b.Entries[i].Index = idx
	}
	n, err := ioctlPtr(m.vcpuFD, "KVM_GET_MSRS", kvmGetMSRs, &b)
	if err != nil {
		return nil, err
	}
	if n != len(m.msrIndices) {
		return nil, fmt.Errorf("kvm: KVM_GET_MSRS read %d of %d MSRs, failed at %#x", n, len(m.msrIndices), m.msrIndices[n])
	}
	return append([]MSR(nil), b.Entries[:n]...), nil
}

func (m *VM) setMSRs(list []MSR) error {
	var b msrs
	b.N = uint32(copy(b.Entries[:], list))
	n, err := ioctlPtr(m.vcpuFD, "KVM_SET_MSRS", kvmSetMSRs, &b)
	if err != nil {
		return err
	}
	if n != len(list) {
		return fmt.Errorf("kvm: KVM_SET_MSRS wrote %d of %d MSRs, failed at %#x", n, len(list), list[n].Index)
	}
	return nil
}

func (m *VM) saveVM() (vmState, error) {
	var s vmState
	if m.hasClock {
		if _, err := ioctlPtr(m.vmFD, "KVM_GET_CLOCK", kvmGetClock, &s.Clock); err != nil {
			return s, err
		}
	}
	if !m.irqchip() {
		return s, nil
	}
	for _, c := range []struct {
		id   uint32
		chip *IRQChip
	}{{irqchipPICMaster, &s.PICMaster}, {irqchipPICSlave, &s.PICSlave}, {irqchipIOAPIC, &s.IOAPIC}} {
		c.chip.ChipID = c.id
		if _, err := ioctlPtr(m.vmFD, "KVM_GET_IRQCHIP", kvmGetIRQChip, c.chip); err != nil {
			return s, err
		}
	}
	_, err := ioctlPtr(m.vmFD, "KVM_GET_PIT2", kvmGetPIT2, &s.PIT)
	return s, err
}

func (m *VM) loadVM(s *vmState) error {
	if m.hasClock {
		// Only the clock value: flags would ask KVM to also honour realtime
		// and host TSC, i.e. to move the clock by the wall time since.
		c := ClockData{Clock: s.Clock.Clock}
		if _, err := ioctlPtr(m.vmFD, "KVM_SET_CLOCK", kvmSetClock, &c); err != nil {
			return err
		}
	}
	if !m.irqchip() {
		return nil
	}
	for _, c := range []*IRQChip{&s.PICMaster, &s.PICSlave, &s.IOAPIC} {
		if _, err := ioctlPtr(m.vmFD, "KVM_SET_IRQCHIP", kvmSetIRQChip, c); err != nil {
			return err
		}
	}
	_, err := ioctlPtr(m.vmFD, "KVM_SET_PIT2", kvmSetPIT2, &s.PIT)
	return err
}
