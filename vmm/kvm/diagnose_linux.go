package kvm

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// diagnoseWait bounds the pause a diagnosis takes.
const diagnoseWait = 2 * time.Second

// diagnose describes where a guest that stopped answering stands: the vCPU
// (RIP, MP state, event injection), the PIC, the agent channel's UART and
// its virtio console.
// It pauses the vCPU briefly; m.mu is held by the caller.
func (m *Machine) diagnose() string {
	ctx, cancel := context.WithTimeout(context.Background(), diagnoseWait)
	defer cancel()
	if err := m.pause(ctx); err != nil {
		return "vCPU: " + err.Error()
	}
	defer m.resume()
	var b strings.Builder
	vm := m.vm
	if r, err := vm.Regs(); err == nil {
		fmt.Fprintf(&b, "vCPU RIP %#x RFLAGS %#x", r.RIP, r.RFLAGS)
	}
	var mp MPState
	if _, err := ioctlPtr(vm.vcpuFD, "KVM_GET_MP_STATE", kvmGetMPState, &mp); err == nil {
		fmt.Fprintf(&b, ", MP state %d", mp.State)
	}
	var ev VCPUEvents
	if _, err := ioctlPtr(vm.vcpuFD, "KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents, &ev); err == nil {
		fmt.Fprintf(&b, ", interrupt injected %d vector %#x shadow %d, exception injected %d pending %d",
			ev.Raw[8], ev.Raw[9], ev.Raw[11], ev.Raw[0], ev.Raw[3])
	}
	if vm.irqchip() {
		pic := IRQChip{ChipID: irqchipPICMaster}
		if _, err := ioctlPtr(vm.vmFD, "KVM_GET_IRQCHIP", kvmGetIRQChip, &pic); err == nil {
			// struct kvm_pic_state: last_irr, irr, imr, isr, ...
			fmt.Fprintf(&b, "; PIC master lines %08b IRR %08b IMR %08b ISR %08b", pic.Chip[0], pic.Chip[1], pic.Chip[2], pic.Chip[3])
		}
	}
	st, level, stats := m.com2.State(), m.com2.IRQLevel(), m.com2.Stats()
	fmt.Fprintf(&b, "; COM2 IER %#x MCR %#x THRE pending %v line %v, %d bytes to the guest queued, %d sent by it, %d read by it",
		st.IER, st.MCR, st.THREPending, level, len(st.RX), stats.TXBytes, stats.RXBytes)
	if m.vcon != nil {
		cs, cst := m.vcon.State(), m.vcon.Stats()
		fmt.Fprintf(&b, "; agent console status %#x ISR %#x port ready %v open %v, %d bytes to the guest queued, %d sent by it, %d given to it",
			cs.Status, cs.ISR, cs.PortReady, cs.GuestOpen, len(cs.RX), cst.TXBytes, cst.RXBytes)
	}
	fmt.Fprintf(&b, "; channel %s", m.channel)
	return b.String()
}
