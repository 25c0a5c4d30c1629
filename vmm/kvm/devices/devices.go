package devices

import (
	"errors"
	"fmt"
)

// Ports and interrupt lines of the machine this package models (see the
// package documentation).
const (
	// COM1Port is the base port of the console UART (ttyS0).
	COM1Port = 0x3f8
	// COM1IRQ is COM1's PIC line.
	COM1IRQ = 4
	// COM2Port is the base port of the agent-channel UART (ttyS1).
	COM2Port = 0x2f8
	// COM2IRQ is COM2's PIC line.
	COM2IRQ = 3
	// UARTPorts is the number of consecutive ports a UART decodes.
	UARTPorts = 8
	// ConsoleIRQ is the agent console's PIC line (the Console after the
	// disks on PCI): free on this machine, which has no floppy controller.
	ConsoleIRQ = 6

	// PCIConfigAddressPort is configuration mechanism #1's 32-bit address
	// register (CONFIG_ADDRESS).
	PCIConfigAddressPort = 0xcf8
	// PCIConfigDataPort is the first of the four CONFIG_DATA ports.
	PCIConfigDataPort = 0xcfc
	// PCIConfigPorts is the number of ports PCIBus decodes, from
	// PCIConfigAddressPort.
	PCIConfigPorts = 8
	// PCIIOBase is where BAR0 of the device in slot 0 would sit; slot s gets
	// PCIIOBase + s*PCIIOStride until the guest moves it.
	PCIIOBase = 0xc000
	// PCIIOStride is the I/O space reserved per slot, in bytes; it bounds a
	// device's BAR0 size.
	PCIIOStride = 0x100
	// PCISlots is the number of device numbers on bus 0.
	PCISlots = 32
)

// Sentinel errors.
var (
	// ErrRXFull is returned by UART.Feed when the bytes do not fit in the
	// receive queue (UARTRXLimit).
	ErrRXFull = errors.New("devices: uart receive queue full")
	// ErrOutOfRange: a guest-physical range is not in RAM.
	ErrOutOfRange = errors.New("devices: guest-physical range outside RAM")
	// ErrBadAccess is wrapped by In and Out for a port the device does not
	// decode or an access size it does not serve.
	ErrBadAccess = errors.New("devices: bad port access")
	// ErrBadState is wrapped by SetState for a state this device cannot take.
	ErrBadState = errors.New("devices: invalid device state")
	// ErrBusFull is returned by PCIBus.Add when every slot is taken.
	ErrBusFull = errors.New("devices: pci bus full")
	// ErrBadConfig is wrapped by constructors and PCIBus.Add for an invalid
	// device description (BAR size, serial, backend size).
	ErrBadConfig = errors.New("devices: invalid device configuration")
)

// IRQ drives one interrupt line (level-triggered); the VMM implements it with
// KVM_IRQ_LINE. Devices call SetLevel only when the level changes (and once
// unconditionally from SetState), always with their own mutex held, so an
// implementation must not call back into the device.
type IRQ interface {
	SetLevel(high bool) error
}

// Memory is guest-physical RAM as seen by a device doing DMA.
type Memory interface {
	// Slice returns the n bytes at guest-physical addr, aliasing guest RAM,
	// or an error (wrapping ErrOutOfRange) if [addr, addr+n) is not all RAM.
	// A device takes its slices anew for each access it serves and never
	// keeps one past it: the machine's implementation marks the range dirty
	// for the next checkpoint or restore when it is taken.
	Slice(addr, n uint64) ([]byte, error)
}

// RAM is guest-physical RAM starting at address 0, one contiguous range.
type RAM []byte

var _ Memory = RAM(nil)

// Slice implements Memory. The returned slice's capacity ends at addr+n, so
// appending to it can never reach past the range.
func (r RAM) Slice(addr, n uint64) ([]byte, error) {
	size := uint64(len(r))
	if addr > size || n > size-addr {
		return nil, fmt.Errorf("devices: %d bytes at %#x (RAM is %#x bytes): %w", n, addr, size, ErrOutOfRange)
	}
	return r[addr : addr+n : addr+n], nil
}

// PortDevice is served on port I/O exits. data is the access: 1, 2 or 4 bytes
// for an ordinary IN/OUT, little-endian; In fills it, Out reads it. The port
// is the absolute port number.
type PortDevice interface {
	In(port uint16, data []byte) error
	Out(port uint16, data []byte) error
}
