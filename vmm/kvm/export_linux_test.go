package kvm

import (
	"context"
	"os"

	"github.com/themisfs/themis/internal/nested"
	"github.com/themisfs/themis/vmm"
)

// The nested job's -inject-fault restore (docs/kvm.md): every restore of
// a Linux machine flips the last byte of guest RAM after copying it back,
// so that the verify gate fails it. Honoured by this test binary only.
func init() {
	if os.Getenv(nested.FaultEnv) == "restore" {
		restoreFault = func(m *Machine) { m.vm.mem[len(m.vm.mem)-1] ^= 0xff }
	}
}

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

// PickChannel is what the machine does once the agent is ready: the
// agent console when the guest opened its port, else COM2.
func PickChannel(m *Machine) { m.pickChannel() }

// AgentChannel is the machine's agent channel: its name (ChannelUART or
// ChannelConsole) and its stream.
func AgentChannel(m *Machine) (string, Port) { return m.channel, m.stream }

// The agent channel's names.
const (
	ChannelUART    = channelUART
	ChannelConsole = channelConsole
)
