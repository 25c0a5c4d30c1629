package kvm

import (
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
