package devices

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakePCI is a PCIDevice whose BAR is a plain register file.
type fakePCI struct {
	cfg  PCIConfig
	regs [PCIIOStride]byte
}

func (f *fakePCI) PCIConfig() PCIConfig { return f.cfg }

func (f *fakePCI) ReadBAR(off uint16, data []byte) error {
	copy(data, f.regs[off:])
	return nil
}

func (f *fakePCI) WriteBAR(off uint16, data []byte) error {
	copy(f.regs[off:], data)
	return nil
}

// confAddr is PCI_CONF1_ADDRESS.
func confAddr(bus, dev, fn, reg int) uint32 {
	return 0x80000000 | uint32(bus)<<16 | uint32(dev)<<11 | uint32(fn)<<8 | uint32(reg&0xfc)
}

// confRead and confWrite do what Linux's pci_conf1_read/write do.
func confRead(t testing.TB, b *PCIBus, addr uint32, reg, size int) uint32 {
	t.Helper()
	out32(t, b, PCIConfigAddressPort, addr)
	data := make([]byte, size)
	port := uint16(PCIConfigDataPort + reg&(4-size))
	if err := b.In(port, data); err != nil {
		t.Fatalf("in %#x: %v", port, err)
	}
	var buf [4]byte
	copy(buf[:], data)
	return binary.LittleEndian.Uint32(buf[:])
}

func confWrite(t testing.TB, b *PCIBus, addr uint32, reg, size int, v uint32) {
	t.Helper()
	out32(t, b, PCIConfigAddressPort, addr)
	var buf [4]byte
	binary.LittleEndian.PutUint32(buf[:], v)
	port := uint16(PCIConfigDataPort + reg&(4-size))
	if err := b.Out(port, buf[:size]); err != nil {
		t.Fatalf("out %#x: %v", port, err)
	}
}

func out32(t testing.TB, b *PCIBus, port uint16, v uint32) {
	t.Helper()
	var buf [4]byte
	binary.LittleEndian.PutUint32(buf[:], v)
	if err := b.Out(port, buf[:]); err != nil {
		t.Fatalf("out %#x: %v", port, err)
	}
}

func newTestBus(t testing.TB) (*PCIBus, *Block) {
	t.Helper()
	bus := NewPCIBus()
	blk, err := NewBlock(newMemBackend(t, 1<<20), "disk0", RAM(make([]byte, 4096)), nil, 11)
	if err != nil {
		t.Fatal(err)
	}
	if slot, err := bus.Add(blk); err != nil || slot != 1 {
		t.Fatalf("Add = %d, %v; want slot 1", slot, err)
	}
	return bus, blk
}

func TestPCIConfigReads(t *testing.T) {
	t.Parallel()
	bus, _ := newTestBus(t)
	tests := []struct {
		name      string
		dev, fn   int
		reg, size int
		want      uint32
	}{
		{"host bridge vendor/device", 0, 0, 0x00, 4, 0x12378086},
		{"host bridge class word (conf1 sanity check)", 0, 0, 0x0a, 2, 0x0600},
		{"host bridge header type", 0, 0, 0x0e, 1, 0},
		{"host bridge has no pin", 0, 0, 0x3d, 1, 0},
		{"block vendor", 1, 0, 0x00, 2, VirtioVendorID},
		{"block device", 1, 0, 0x02, 2, VirtioBlockDeviceID},
		{"block vendor/device dword", 1, 0, 0x00, 4, 0x10011af4},
		{"block command: I/O on", 1, 0, 0x04, 2, pciCommandIO},
		{"block status", 1, 0, 0x06, 2, 0},
		{"block revision + class", 1, 0, 0x08, 4, 0x01800000},
		{"block class byte", 1, 0, 0x0b, 1, 0x01},
		{"block subclass byte", 1, 0, 0x0a, 1, 0x80},
		{"block header type", 1, 0, 0x0e, 1, 0},
		{"block BAR0", 1, 0, 0x10, 4, 0xc101},
		{"block BAR1", 1, 0, 0x14, 4, 0},
		{"block subsystem vendor", 1, 0, 0x2c, 2, VirtioVendorID},
		{"block subsystem id", 1, 0, 0x2e, 2, VirtioBlockType},
		{"block ROM BAR", 1, 0, 0x30, 4, 0},
		{"block capabilities pointer", 1, 0, 0x34, 1, 0},
		{"block interrupt line", 1, 0, 0x3c, 1, 11},
		{"block interrupt pin", 1, 0, 0x3d, 1, pciPinINTA},
		{"block line+pin word", 1, 0, 0x3c, 2, 0x010b},
		{"empty slot", 2, 0, 0x00, 4, 0xffffffff},
		{"empty slot word", 31, 0, 0x02, 2, 0xffff},
		{"function 1", 1, 1, 0x00, 4, 0xffffffff},
	}
	for _, tt := range tests {
		if got := confRead(t, bus, confAddr(0, tt.dev, tt.fn, tt.reg), tt.reg, tt.size); got != tt.want {
			t.Errorf("%s: %02x.%d reg %#x size %d = %#x, want %#x", tt.name, tt.dev, tt.fn, tt.reg, tt.size, got, tt.want)
		}
	}

	others := []struct {
		name string
		addr uint32
	}{
		{"bus 1", confAddr(1, 1, 0, 0)},
		{"enable bit clear", confAddr(0, 1, 0, 0) &^ confEnable},
		{"extended register", confAddr(0, 1, 0, 0) | 1<<24},
	}
	for _, tt := range others {
		if got := confRead(t, bus, tt.addr, 0, 4); got != 0xffffffff {
			t.Errorf("%s: %#x, want all ones", tt.name, got)
		}
	}
}

func TestPCIConfigAddressPort(t *testing.T) {
	t.Parallel()
	bus := NewPCIBus()
	// pci_check_type1: a byte to 0xcfb, then the dword round trip.
	if err := bus.Out(0xcfb, []byte{1}); err != nil {
		t.Fatal(err)
	}
	out32(t, bus, PCIConfigAddressPort, 0x80000000)
	var d [4]byte
	if err := bus.In(PCIConfigAddressPort, d[:]); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(d[:]); got != 0x80000000 {
		t.Errorf("CONFIG_ADDRESS reads %#x, want 0x80000000", got)
	}
	out32(t, bus, PCIConfigAddressPort, 0x80000003)
	if err := bus.In(PCIConfigAddressPort, d[:]); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(d[:]); got != 0x80000000 {
		t.Errorf("CONFIG_ADDRESS low bits: reads %#x, want 0x80000000", got)
	}
	var b [1]byte
	if err := bus.In(0xcf8, b[:]); err != nil || b[0] != 0xff {
		t.Errorf("byte read of 0xcf8 = %#x, %v; want 0xff", b[0], err)
	}

	bad := []struct {
		port uint16
		n    int
	}{{0xcfd, 4}, {0xcfe, 4}, {0xcfc, 3}, {0xcf9, 4}, {0xd00, 1}, {0xcf7, 1}, {0xcfc, 0}}
	for _, tt := range bad {
		if err := bus.In(tt.port, make([]byte, tt.n)); !errors.Is(err, ErrBadAccess) {
			t.Errorf("%d bytes at %#x: %v, want ErrBadAccess", tt.n, tt.port, err)
		}
	}
}

func TestPCIBARSizingAndMove(t *testing.T) {
	t.Parallel()
	bus := NewPCIBus()
	dev := &fakePCI{cfg: PCIConfig{VendorID: 0x1234, DeviceID: 0x5678, IOSize: 0x40, IRQ: 5}}
	for i := range dev.regs {
		dev.regs[i] = byte(i)
	}
	slot, err := bus.Add(dev)
	if err != nil {
		t.Fatal(err)
	}
	a := confAddr(0, slot, 0, pciBAR0)
	oldBase := uint16(PCIIOBase + slot*PCIIOStride)

	if d, ok := bus.Route(oldBase + 0x3f); !ok || d == nil {
		t.Fatalf("Route(%#x) finds nothing", oldBase+0x3f)
	}
	if _, ok := bus.Route(oldBase + 0x40); ok {
		t.Errorf("Route past the BAR finds a device")
	}

	// Sizing as Linux's __pci_read_base does it: decode off, all ones, read, restore.
	confWrite(t, bus, confAddr(0, slot, 0, pciCommand), pciCommand, 2, 0)
	if _, ok := bus.Route(oldBase); ok {
		t.Errorf("Route with I/O decoding off finds a device")
	}
	orig := confRead(t, bus, a, pciBAR0, 4)
	confWrite(t, bus, a, pciBAR0, 4, 0xffffffff)
	if got, want := confRead(t, bus, a, pciBAR0, 4), uint32(0xffffffc1); got != want {
		t.Errorf("BAR0 size mask = %#x, want %#x", got, want)
	}
	confWrite(t, bus, a, pciBAR0, 4, orig)
	confWrite(t, bus, confAddr(0, slot, 0, pciCommand), pciCommand, 2, pciCommandIO)
	if _, ok := bus.Route(oldBase); !ok {
		t.Errorf("Route after sizing finds nothing")
	}

	// Move.
	confWrite(t, bus, a, pciBAR0, 4, 0xd000)
	if got := confRead(t, bus, a, pciBAR0, 4); got != 0xd001 {
		t.Errorf("moved BAR0 reads %#x, want 0xd001", got)
	}
	if _, ok := bus.Route(oldBase); ok {
		t.Errorf("old base still routes")
	}
	pd, ok := bus.Route(0xd010)
	if !ok {
		t.Fatal("new base does not route")
	}
	data := make([]byte, 4)
	if err := pd.In(0xd010, data); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]byte{0x10, 0x11, 0x12, 0x13}, data); diff != "" {
		t.Errorf("BAR read through Route (-want +got):\n%s", diff)
	}
	if err := pd.Out(0xd03f, []byte{0xee}); err != nil || dev.regs[0x3f] != 0xee {
		t.Errorf("BAR write through Route: %v, reg %#x", err, dev.regs[0x3f])
	}
	if err := pd.In(0xd03e, make([]byte, 4)); !errors.Is(err, ErrBadAccess) {
		t.Errorf("access past the BAR: %v, want ErrBadAccess", err)
	}

	// Misaligned base bits are dropped; a BAR beyond 64 KiB does not decode.
	confWrite(t, bus, a, pciBAR0, 4, 0xe07f)
	if got := confRead(t, bus, a, pciBAR0, 4); got != 0xe041 {
		t.Errorf("BAR0 = %#x, want 0xe041", got)
	}
	confWrite(t, bus, a, pciBAR0, 4, 0xffc0)
	if _, ok := bus.Route(0xffc0); !ok {
		t.Errorf("BAR at the top of I/O space does not route")
	}
	confWrite(t, bus, a, pciBAR0, 4, 0x10000)
	if _, ok := bus.Route(0); ok {
		t.Errorf("BAR above 64 KiB routes")
	}

	// Interrupt line is writable, pin is not; read-only fields stay.
	confWrite(t, bus, confAddr(0, slot, 0, pciInterruptLine), pciInterruptLine, 2, 0x0409)
	if got := confRead(t, bus, confAddr(0, slot, 0, pciInterruptLine), pciInterruptLine, 2); got != 0x0109 {
		t.Errorf("line/pin after write = %#x, want 0x0109", got)
	}
	confWrite(t, bus, confAddr(0, slot, 0, 0), 0, 4, 0)
	if got := confRead(t, bus, confAddr(0, slot, 0, 0), 0, 4); got != 0x56781234 {
		t.Errorf("vendor/device after write = %#x", got)
	}
}

func TestPCIAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		size uint16
		ok   bool
	}{{0x40, true}, {0x100, true}, {4, true}, {2, false}, {0x30, false}, {0x200, false}, {0, false}}
	for _, tt := range tests {
		_, err := NewPCIBus().Add(&fakePCI{cfg: PCIConfig{VendorID: 1, IOSize: tt.size}})
		if got := err == nil; got != tt.ok || (!tt.ok && !errors.Is(err, ErrBadConfig)) {
			t.Errorf("IOSize %#x: %v, want ok=%v", tt.size, err, tt.ok)
		}
	}
	bus := NewPCIBus()
	for want := 1; want < PCISlots; want++ {
		slot, err := bus.Add(&fakePCI{cfg: PCIConfig{VendorID: 1, IOSize: 0x40}})
		if err != nil || slot != want {
			t.Fatalf("Add = %d, %v; want %d", slot, err, want)
		}
	}
	if _, err := bus.Add(&fakePCI{cfg: PCIConfig{VendorID: 1, IOSize: 0x40}}); !errors.Is(err, ErrBusFull) {
		t.Errorf("Add to a full bus: %v, want ErrBusFull", err)
	}
}

func TestPCIState(t *testing.T) {
	t.Parallel()
	bus, _ := newTestBus(t)
	confWrite(t, bus, confAddr(0, 1, 0, pciBAR0), pciBAR0, 4, 0xd000)
	out32(t, bus, PCIConfigAddressPort, confAddr(0, 1, 0, 0x3c))
	saved := bus.State()
	if len(saved.Slots) != 2 || saved.Slots[1].Slot != 1 {
		t.Fatalf("State slots = %+v", saved.Slots)
	}

	bus2, _ := newTestBus(t)
	if err := bus2.SetState(saved); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(saved, bus2.State()); diff != "" {
		t.Errorf("State after SetState (-want +got):\n%s", diff)
	}
	if _, ok := bus2.Route(0xd000); !ok {
		t.Errorf("restored BAR does not route")
	}
	if _, ok := bus2.Route(0xc100); ok {
		t.Errorf("pre-restore BAR still routes")
	}
	var d [1]byte
	if err := bus2.In(PCIConfigDataPort, d[:]); err != nil || d[0] != 11 {
		t.Errorf("restored CONFIG_ADDRESS: line reads %d, %v", d[0], err)
	}

	corrupt := func(f func(*PCIBusState)) PCIBusState {
		s := bus.State()
		f(&s)
		return s
	}
	bad := map[string]PCIBusState{
		"read-only byte": corrupt(func(s *PCIBusState) { s.Slots[1].Config[0] ^= 1 }),
		"missing slot":   corrupt(func(s *PCIBusState) { s.Slots = s.Slots[:1] }),
		"empty slot":     corrupt(func(s *PCIBusState) { s.Slots[1].Slot = 5 }),
		"short config":   corrupt(func(s *PCIBusState) { s.Slots[1].Config = s.Slots[1].Config[:64] }),
		"address bits":   corrupt(func(s *PCIBusState) { s.Address |= 1 }),
	}
	for name, s := range bad {
		if err := bus2.SetState(s); !errors.Is(err, ErrBadState) {
			t.Errorf("%s: %v, want ErrBadState", name, err)
		}
	}
}
