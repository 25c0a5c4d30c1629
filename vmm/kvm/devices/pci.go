package devices

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// PCIConfig describes a PCI function's fixed identity, its I/O BAR0 and its
// interrupt line. Every device is a single-function, type-0 header with no
// capabilities and no other BARs.
type PCIConfig struct {
	// VendorID and DeviceID identify the device.
	VendorID, DeviceID uint16
	// SubsystemVendorID and SubsystemID identify the board (virtio legacy
	// devices put the virtio device type in SubsystemID).
	SubsystemVendorID, SubsystemID uint16
	// Class is the 24-bit class code: base class<<16 | subclass<<8 | prog-if.
	Class uint32
	// Revision is the revision ID.
	Revision uint8
	// IOSize is BAR0's size in bytes, in I/O space: a power of two from 4 to
	// PCIIOStride.
	IOSize uint16
	// IRQ is the PIC line preset in the interrupt line register; the pin is
	// INTA.
	IRQ uint8
}

// PCIDevice is a device on PCIBus, reached through its I/O BAR0.
type PCIDevice interface {
	// PCIConfig returns the device's identity; PCIBus.Add reads it once.
	PCIConfig() PCIConfig
	// ReadBAR serves a guest read at offset off of BAR0 (off+len(data) is
	// within IOSize).
	ReadBAR(off uint16, data []byte) error
	// WriteBAR serves a guest write at offset off of BAR0.
	WriteBAR(off uint16, data []byte) error
}

// Host bridge identity: an Intel 440FX, which Linux's conf1 sanity check
// (class 0x0600 at some devfn) accepts.
const (
	hostBridgeVendor   = 0x8086
	hostBridgeDevice   = 0x1237
	hostBridgeClass    = 0x060000
	hostBridgeRevision = 0x02
)

// Configuration space offsets and bits.
const (
	pciConfigSize    = 256
	pciVendorID      = 0x00
	pciDeviceID      = 0x02
	pciCommand       = 0x04
	pciRevision      = 0x08
	pciCacheLine     = 0x0c
	pciLatency       = 0x0d
	pciBAR0          = 0x10
	pciSubsysVendor  = 0x2c
	pciSubsysID      = 0x2e
	pciInterruptLine = 0x3c
	pciInterruptPin  = 0x3d

	pciCommandIO = 0x0001
	// pciCommandWritable: I/O, memory, bus master, parity and SERR enable.
	// INTx disable is not implemented, so it reads back 0 (Linux then
	// knows INTx masking is unsupported).
	pciCommandWritable = 0x0147
	pciBARIO           = 0x1 // BAR bit 0: I/O space
	pciPinINTA         = 1

	confEnable   = 0x80000000
	confReserved = 0x7f000000 // includes AMD's extended-register bits
	confAddrMask = 0xfffffffc
)

// PCIBusState is a PCIBus's state, for checkpoints.
type PCIBusState struct {
	// Address is CONFIG_ADDRESS as the guest last wrote it.
	Address uint32
	// Slots holds every populated slot, the host bridge included, in
	// ascending order.
	Slots []PCISlotState
}

// PCISlotState is one device's configuration space.
type PCISlotState struct {
	// Slot is the device number on bus 0.
	Slot int
	// Config is the 256-byte configuration space.
	Config []byte
}

// PCIBus is bus 0 behind configuration mechanism #1 (ports 0xcf8-0xcff),
// with a host bridge in slot 0 and devices from slot 1. It serves the
// configuration ports itself; Route finds the device behind an I/O port in
// a BAR.
type PCIBus struct {
	mu    sync.Mutex
	addr  uint32
	slots [PCISlots]*pciSlot
}

type pciSlot struct {
	dev    PCIDevice // nil for the host bridge
	ioSize uint16    // 0: no BAR
	cfg    [pciConfigSize]byte
	wmask  [pciConfigSize]byte // bits the guest may write
	win    *barWindow          // nil while BAR0 does not decode
}

var _ PortDevice = (*PCIBus)(nil)

// NewPCIBus returns a bus holding only the host bridge.
func NewPCIBus() *PCIBus {
	b := &PCIBus{}
	hb := &pciSlot{}
	hb.setIdentity(PCIConfig{VendorID: hostBridgeVendor, DeviceID: hostBridgeDevice, Class: hostBridgeClass, Revision: hostBridgeRevision})
	b.slots[0] = hb
	return b
}

// Add puts d in the lowest free slot from 1, with BAR0 at
// PCIIOBase+slot*PCIIOStride, I/O decoding enabled (as firmware would leave
// it) and the interrupt line set to d's IRQ.
func (b *PCIBus) Add(d PCIDevice) (slot int, err error) {
	c := d.PCIConfig()
	if c.IOSize < 4 || c.IOSize > PCIIOStride || c.IOSize&(c.IOSize-1) != 0 {
		return 0, fmt.Errorf("devices: pci add %04x:%04x: BAR0 size %#x: %w", c.VendorID, c.DeviceID, c.IOSize, ErrBadConfig)
	}
	if c.VendorID == 0xffff || c.VendorID == 0 {
		return 0, fmt.Errorf("devices: pci add: vendor ID %#x: %w", c.VendorID, ErrBadConfig)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for slot = 1; slot < PCISlots; slot++ {
		if b.slots[slot] == nil {
			break
		}
	}
	if slot == PCISlots {
		return 0, fmt.Errorf("devices: pci add %04x:%04x: %w", c.VendorID, c.DeviceID, ErrBusFull)
	}
	s := &pciSlot{dev: d, ioSize: c.IOSize}
	s.setIdentity(c)
	binary.LittleEndian.PutUint16(s.wmask[pciCommand:], pciCommandWritable)
	binary.LittleEndian.PutUint16(s.cfg[pciCommand:], pciCommandIO)
	binary.LittleEndian.PutUint32(s.wmask[pciBAR0:], ^uint32(c.IOSize-1)&^3)
	binary.LittleEndian.PutUint32(s.cfg[pciBAR0:], uint32(PCIIOBase+slot*PCIIOStride)|pciBARIO)
	binary.LittleEndian.PutUint16(s.cfg[pciSubsysVendor:], c.SubsystemVendorID)
	binary.LittleEndian.PutUint16(s.cfg[pciSubsysID:], c.SubsystemID)
	s.cfg[pciInterruptLine] = c.IRQ
	s.wmask[pciInterruptLine] = 0xff
	s.cfg[pciInterruptPin] = pciPinINTA
	s.updateWindow()
	b.slots[slot] = s
	return slot, nil
}

// setIdentity fills the read-only header fields.
func (s *pciSlot) setIdentity(c PCIConfig) {
	binary.LittleEndian.PutUint16(s.cfg[pciVendorID:], c.VendorID)
	binary.LittleEndian.PutUint16(s.cfg[pciDeviceID:], c.DeviceID)
	binary.LittleEndian.PutUint32(s.cfg[pciRevision:], c.Class<<8|uint32(c.Revision))
	s.wmask[pciCacheLine] = 0xff
	s.wmask[pciLatency] = 0xff
}

// updateWindow recomputes where BAR0 decodes: nowhere while I/O decoding is
// off, BAR0 is 0, or the range leaves the 64 KiB I/O space.
func (s *pciSlot) updateWindow() {
	s.win = nil
	if s.ioSize == 0 || binary.LittleEndian.Uint16(s.cfg[pciCommand:])&pciCommandIO == 0 {
		return
	}
	base := binary.LittleEndian.Uint32(s.cfg[pciBAR0:]) &^ 3
	if base == 0 || base > 0x10000-uint32(s.ioSize) {
		return
	}
	s.win = &barWindow{dev: s.dev, base: uint16(base), size: s.ioSize}
}

// Route returns the device whose BAR0 decodes port, as a PortDevice taking
// absolute ports, or false. If BARs overlap, the lowest slot wins.
func (b *PCIBus) Route(port uint16) (PortDevice, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.slots {
		if s != nil && s.win != nil && s.win.decodes(port) {
			return s.win, true
		}
	}
	return nil, false
}

// In implements PortDevice for ports 0xcf8-0xcff.
func (b *PCIBus) In(port uint16, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch kind, off, err := b.decode(port, len(data)); {
	case err != nil:
		return err
	case kind == confAddress:
		binary.LittleEndian.PutUint32(data, b.addr)
	case kind == confOther:
		fill(data, 0xff) // nothing decodes byte or word accesses there
	default:
		s, reg := b.target()
		if s == nil {
			fill(data, 0xff)
			return nil
		}
		copy(data, s.cfg[reg+off:])
	}
	return nil
}

// Out implements PortDevice for ports 0xcf8-0xcff.
func (b *PCIBus) Out(port uint16, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch kind, off, err := b.decode(port, len(data)); {
	case err != nil:
		return err
	case kind == confAddress:
		b.addr = binary.LittleEndian.Uint32(data) & confAddrMask
	case kind == confOther:
		// ignored (Linux's conf1 probe writes a byte to 0xcfb)
	default:
		s, reg := b.target()
		if s == nil {
			return nil
		}
		for i, v := range data {
			o := reg + off + i
			s.cfg[o] = s.cfg[o]&^s.wmask[o] | v&s.wmask[o]
		}
		s.updateWindow()
	}
	return nil
}

const (
	confAddress = iota // a dword access to CONFIG_ADDRESS
	confOther          // a narrower access to 0xcf8-0xcfb
	confData           // an access to CONFIG_DATA
)

// decode classifies an access to the configuration ports.
func (b *PCIBus) decode(port uint16, n int) (kind, off int, err error) {
	switch {
	case n != 1 && n != 2 && n != 4:
	case port >= PCIConfigAddressPort && port < PCIConfigDataPort:
		if port == PCIConfigAddressPort && n == 4 {
			return confAddress, 0, nil
		}
		if int(port-PCIConfigAddressPort)+n <= 4 {
			return confOther, 0, nil
		}
	case port >= PCIConfigDataPort && port < PCIConfigAddressPort+PCIConfigPorts:
		off = int(port - PCIConfigDataPort)
		if off+n <= 4 {
			return confData, off, nil
		}
	}
	return 0, 0, fmt.Errorf("devices: pci: %d-byte access at port %#x: %w", n, port, ErrBadAccess)
}

// target returns the slot and dword-aligned register CONFIG_ADDRESS
// selects, or nil where nothing answers (disabled, extended register, other
// bus or function, empty slot).
func (b *PCIBus) target() (*pciSlot, int) {
	a := b.addr
	bus, dev, fn := a>>16&0xff, a>>11&0x1f, a>>8&0x7
	if a&confEnable == 0 || a&confReserved != 0 || bus != 0 || fn != 0 {
		return nil, 0
	}
	return b.slots[dev], int(a & 0xfc)
}

// State returns the configuration address and every slot's configuration
// space.
func (b *PCIBus) State() PCIBusState {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := PCIBusState{Address: b.addr}
	for i, s := range b.slots {
		if s != nil {
			st.Slots = append(st.Slots, PCISlotState{Slot: i, Config: append([]byte(nil), s.cfg[:]...)})
		}
	}
	return st
}

// SetState restores the configuration address and configuration spaces. The
// bus must hold the same devices in the same slots, and only bits the guest
// can write may differ.
func (b *PCIBus) SetState(st PCIBusState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st.Address&^confAddrMask != 0 {
		return fmt.Errorf("devices: pci set state: address %#x: %w", st.Address, ErrBadState)
	}
	var seen [PCISlots]bool
	for _, ss := range st.Slots {
		if ss.Slot < 0 || ss.Slot >= PCISlots || b.slots[ss.Slot] == nil || seen[ss.Slot] {
			return fmt.Errorf("devices: pci set state: slot %d is empty or repeated: %w", ss.Slot, ErrBadState)
		}
		seen[ss.Slot] = true
		if len(ss.Config) != pciConfigSize {
			return fmt.Errorf("devices: pci set state: slot %d: %d config bytes: %w", ss.Slot, len(ss.Config), ErrBadState)
		}
		s := b.slots[ss.Slot]
		for i, v := range ss.Config {
			if (v^s.cfg[i])&^s.wmask[i] != 0 {
				return fmt.Errorf("devices: pci set state: slot %d: read-only config byte %#x differs: %w", ss.Slot, i, ErrBadState)
			}
		}
	}
	for i, s := range b.slots {
		if s != nil && !seen[i] {
			return fmt.Errorf("devices: pci set state: slot %d missing: %w", i, ErrBadState)
		}
	}
	b.addr = st.Address
	for _, ss := range st.Slots {
		s := b.slots[ss.Slot]
		copy(s.cfg[:], ss.Config)
		s.updateWindow()
	}
	return nil
}

// barWindow is a device's BAR0 at one base port. It is immutable; the bus
// replaces it when the guest moves or disables the BAR.
type barWindow struct {
	dev  PCIDevice
	base uint16
	size uint16
}

func (w *barWindow) decodes(port uint16) bool {
	return port >= w.base && port-w.base < w.size
}

func (w *barWindow) offset(port uint16, n int) (uint16, error) {
	if n == 0 || !w.decodes(port) || int(port-w.base)+n > int(w.size) {
		return 0, fmt.Errorf("devices: pci BAR %#x+%#x: %d-byte access at port %#x: %w", w.base, w.size, n, port, ErrBadAccess)
	}
	return port - w.base, nil
}

// In implements PortDevice.
func (w *barWindow) In(port uint16, data []byte) error {
	off, err := w.offset(port, len(data))
	if err != nil {
		return err
	}
	return w.dev.ReadBAR(off, data)
}

// Out implements PortDevice.
func (w *barWindow) Out(port uint16, data []byte) error {
	off, err := w.offset(port, len(data))
	if err != nil {
		return err
	}
	return w.dev.WriteBAR(off, data)
}

func fill(p []byte, v byte) {
	for i := range p {
		p[i] = v
	}
}
