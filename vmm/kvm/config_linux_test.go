package kvm

import (
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/vmm"
)

// TestLinuxConfigICount: instruction counting is QEMU's; the KVM backend
// refuses it by name before a VM exists.
func TestLinuxConfigICount(t *testing.T) {
	t.Parallel()
	if _, err := linuxConfig(vmm.Config{Kernel: "/vmlinuz", ICount: true}); err == nil || !strings.Contains(err.Error(), "ICount") {
		t.Errorf("linuxConfig(ICount) = %v, want an error naming ICount", err)
	}
}

// TestLinuxConfigAgentChannel: the KVM backend offers the agent console
// (virtio, the default) or only the UART; anything else fails before a VM
// exists.
func TestLinuxConfigAgentChannel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ch      vmm.AgentChannel
		wantErr string
	}{
		{"", ""},
		{vmm.AgentUART, ""},
		{vmm.AgentVirtio, ""},
		{"pipe", `want "virtio" or "uart"`},
	}
	for _, tt := range tests {
		_, err := linuxConfig(vmm.Config{Kernel: "/vmlinuz", AgentChannel: tt.ch})
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("linuxConfig(AgentChannel %q) = %v, want error %q", tt.ch, err, tt.wantErr)
		}
	}
}

// TestLinuxCmdline: the machine has no firmware tables and routes every
// interrupt through the PIC, so the kernel must be told to use neither
// APIC: without nolapic the generic kernel (MP table support built in)
// set its local APIC up in virtual-wire mode and its timer stopped
// ticking at boot in the emulated AMD-V host.
func TestLinuxCmdline(t *testing.T) {
	t.Parallel()
	params := strings.Fields(linuxCmdline)
	for _, tt := range []struct{ param, why string }{
		{"noapic", "no IO-APIC: PIC interrupts"},
		{"nolapic", "no local APIC: the PIT's tick through the PIC, with either kernel flavour"},
		{"acpi=off", "no ACPI tables"},
		{"pci=conf1", "PCI configuration through ports 0xcf8/0xcfc"},
		{"reboot=k", "a panic resets through the i8042, ending the run"},
	} {
		if !slices.Contains(params, tt.param) {
			t.Errorf("linuxCmdline %q lacks %s (%s)", linuxCmdline, tt.param, tt.why)
		}
	}
}
