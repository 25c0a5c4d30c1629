package kvm

import (
	"context"

	"github.com/themisfs/themis/vmm"
)

// StartAnyHost is start without the hardware-virtualization check, for
// tests of the checks that come before booting.
func StartAnyHost(ctx context.Context, cfg vmm.Config) (*Machine, error) {
	return start(ctx, cfg, true)
}

// StartNoWait builds and starts the machine without the hardware check and
// without waiting for the agent: the PVM early-boot test watches the console.
func StartNoWait(ctx context.Context, cfg vmm.Config) (*Machine, error) {
	return start(ctx, cfg, false)
}

// Dead is why the guest stopped for good, or nil while it runs.
func (m *Machine) Dead() error { return m.deadErr() }
