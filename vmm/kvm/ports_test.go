package kvm

import (
	"testing"

	"github.com/themisfs/themis/vmm/kvm/devices"
)

// namedDevice is a PortDevice that only has a name.
type namedDevice string

func (namedDevice) In(uint16, []byte) error  { return nil }
func (namedDevice) Out(uint16, []byte) error { return nil }

func TestPortTableLookup(t *testing.T) {
	t.Parallel()
	table := portTable{
		{portRange{devices.COM1Port, devices.COM1Port + devices.UARTPorts - 1, "COM1"}, namedDevice("COM1")},
		{portRange{devices.PCIConfigAddressPort, devices.PCIConfigAddressPort + devices.PCIConfigPorts - 1, "PCI"}, namedDevice("PCI")},
	}
	tests := []struct {
		port uint16
		want string // "" for none
	}{
		{devices.COM1Port, "COM1"},
		{devices.COM1Port + devices.UARTPorts - 1, "COM1"},
		{devices.COM1Port + devices.UARTPorts, ""},
		{devices.COM1Port - 1, ""},
		{devices.PCIConfigAddressPort, "PCI"},
		{devices.PCIConfigAddressPort + devices.PCIConfigPorts - 1, "PCI"},
		{0x3333, ""},
	}
	for _, tc := range tests {
		dev, ok := table.lookup(tc.port)
		got := ""
		if ok {
			got = string(dev.(namedDevice))
		}
		if got != tc.want {
			t.Errorf("lookup(%#x) = %q, want %q", tc.port, got, tc.want)
		}
	}
}

func TestAbsentPort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		port uint16
		want string
	}{
		{0x80, "POST code / io delay"},
		{0x3b0, "VGA"},
		{0x3df, "VGA"},
		{0x3e0, ""},
		{0x3333, ""},
	}
	for _, tc := range tests {
		if got := absentPort(tc.port); got != tc.want {
			t.Errorf("absentPort(%#x) = %q, want %q", tc.port, got, tc.want)
		}
	}
}
