package kvm

import "github.com/themisfs/themis/vmm/kvm/devices"

// portRange is the I/O ports [first, last] of one device.
type portRange struct {
	first, last uint16
	name        string
}

func (r portRange) has(port uint16) bool { return port >= r.first && port <= r.last }

// portDevice is a device served at a fixed port range.
type portDevice struct {
	portRange
	dev devices.PortDevice
}

// portTable dispatches port I/O to the devices at fixed ports. The PCI
// devices' I/O BARs move (the guest programs them) and are routed by the
// bus instead.
type portTable []portDevice

// lookup returns the device whose range holds port.
func (t portTable) lookup(port uint16) (devices.PortDevice, bool) {
	for _, d := range t {
		if d.has(port) {
			return d.dev, true
		}
	}
	return nil, false
}

// absentPorts are legacy PC ports a booting Linux kernel probes for hardware
// this machine does not have. Reads return all ones and writes are dropped
// (and counted), as on a PC where the chip is missing. Any port outside this
// table and the machine's devices fails the run with the port named.
var absentPorts = []portRange{
	{0x00, 0x1f, "DMA controller 1"},
	{0x22, 0x23, "chipset configuration"},
	{0x60, 0x60, "i8042 data"},
	{0x64, 0x64, "i8042 command"},
	{0x80, 0x80, "POST code / io delay"},
	{0x81, 0x8f, "DMA page registers"},
	{0x92, 0x92, "system control port A"},
	{0xc0, 0xdf, "DMA controller 2"},
	{0xed, 0xed, "io delay"},
	{0xf0, 0xf1, "math coprocessor"},
	{0x170, 0x177, "IDE secondary"},
	{0x1ce, 0x1d1, "Bochs VBE"},
	{0x1f0, 0x1f7, "IDE primary"},
	{0x278, 0x27f, "parallel port 2"},
	{0x2e8, 0x2ef, "COM4"},
	{0x376, 0x376, "IDE secondary control"},
	{0x378, 0x37f, "parallel port 1"},
	{0x3b0, 0x3df, "VGA"},
	{0x3e8, 0x3ef, "COM3"},
	{0x3f0, 0x3f7, "floppy controller"},
	{0x402, 0x402, "debug console"},
	{0x510, 0x511, "firmware configuration"},
	{0xcf9, 0xcf9, "reset control"},
}

// absentPort names the absent legacy device at port, or "".
func absentPort(port uint16) string {
	for _, r := range absentPorts {
		if r.has(port) {
			return r.name
		}
	}
	return ""
}

// isReset says whether a write to port asks for a machine reset: the i8042
// "pulse reset line" command and the reset control register's reset bit.
// With panic=-1 a panicking kernel resets this way.
func isReset(port uint16, data []byte) bool {
	if len(data) == 0 {
		return false
	}
	switch port {
	case 0x64:
		return data[0] == 0xfe
	case 0xcf9:
		return data[0]&0x04 != 0
	}
	return false
}
