package devices

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// Virtio legacy PCI identity and limits of a console device.
const (
	// VirtioConsoleDeviceID is the transitional PCI device ID of
	// virtio-console.
	VirtioConsoleDeviceID = 0x1003
	// VirtioConsoleType is the virtio device type of a console, in the PCI
	// subsystem ID.
	VirtioConsoleType = 3
	// ConsoleIOSize is the size of the legacy register block (BAR0), in
	// bytes: the common registers and struct virtio_console_config.
	ConsoleIOSize = 0x20
	// ConsoleQueueSize is the number of entries of each of the four queues.
	ConsoleQueueSize = 128
	// ConsoleRXLimit bounds the host bytes a Console holds for the guest,
	// in bytes (Feed refuses more with ErrRXFull).
	ConsoleRXLimit = 1 << 20
	// ConsoleMaxChain bounds the bytes of one chain the guest transmits
	// (Linux sends at most 32 KiB per write, one pipe's worth per splice);
	// a longer chain stops the device with NEEDS_RESET.
	ConsoleMaxChain = 1 << 20
	// ConsoleNameMax is the longest port name NewConsole accepts.
	ConsoleNameMax = 64
	// ConsoleControlLimit bounds the control messages waiting for a
	// control receive buffer; more are dropped (and counted).
	ConsoleControlLimit = 16

	consoleClass = 0x078000 // communication, other
)

// Feature bits (mirrors include/uapi/linux/virtio_console.h).
const (
	consoleFMultiport = 1 << 1
	// ConsoleFeatures is what a Console offers: MULTIPORT (control queues,
	// so that it can name its port). SIZE and EMERG_WRITE are not offered.
	ConsoleFeatures = consoleFMultiport
)

// The queues, in the order Linux's init_vqs finds them with MULTIPORT and
// one port: port 0's receiveq and transmitq, then the control pair.
const (
	consoleRXQ     = 0 // port 0 receiveq: host to guest
	consoleTXQ     = 1 // port 0 transmitq: guest to host
	consoleCtrlRXQ = 2 // control receiveq: device to driver
	consoleCtrlTXQ = 3 // control transmitq: driver to device
	consoleQueues  = 4
)

// Control events (mirrors struct virtio_console_control: le32 id, le16
// event, le16 value).
const (
	ctrlDeviceReady = 0
	ctrlPortAdd     = 1
	ctrlPortRemove  = 2
	ctrlPortReady   = 3
	ctrlConsolePort = 4
	ctrlResize      = 5
	ctrlPortOpen    = 6
	ctrlPortName    = 7

	ctrlHeaderSize = 8
	ctrlMsgMax     = ctrlHeaderSize + ConsoleNameMax + 1 // PORT_NAME with the name and a NUL
	consolePort    = 0                                   // the one port's id
)

// ConsoleStats counts a Console's work.
type ConsoleStats struct {
	// TXBytes is the number of bytes the guest transmitted that out accepted.
	TXBytes uint64
	// RXBytes is the number of host bytes put into the guest's buffers.
	RXBytes uint64
	// TXChains and RXChains are the data chains completed each way.
	TXChains, RXChains uint64
	// Dropped is the number of transmitted bytes lost because out returned
	// an error.
	Dropped uint64
	// RXDiscarded is the number of host bytes discarded by a device reset.
	RXDiscarded uint64
	// Control is the number of control messages the driver sent.
	Control uint64
	// Errors counts control messages ignored (malformed, unknown port or
	// event) or dropped (ConsoleControlLimit), and the times the device
	// stopped with NEEDS_RESET.
	Errors uint64
}

// ConsoleState is a Console's complete state, for checkpoints. HostFeatures,
// Name and the queue sizes are constants of the device, saved so that
// SetState can refuse a state from a different device.
type ConsoleState struct {
	// HostFeatures is the feature bits the device offers; GuestFeatures
	// the ones the driver accepted.
	HostFeatures, GuestFeatures uint32
	// QueueSelect is the queue select register.
	QueueSelect uint16
	// Status is the device status register; ISR the interrupt status (bit
	// 0 queue, bit 1 config).
	Status, ISR uint8
	// Queues holds the four queues' registers and cursors.
	Queues []VirtqueueState
	// Name is the port's name.
	Name string
	// DeviceReady says the driver sent DEVICE_READY (the device answered
	// with PORT_ADD); PortReady that it sent PORT_READY for the port (the
	// device answered with PORT_NAME and PORT_OPEN); GuestOpen is the
	// value of the driver's last PORT_OPEN (a guest program has the port
	// open).
	DeviceReady, PortReady, GuestOpen bool
	// Control holds the control messages waiting for a control receive
	// buffer, oldest first.
	Control [][]byte
	// RX holds the host bytes not yet put into the guest's buffers, oldest
	// first.
	RX []byte
}

// Console is a legacy virtio-pci console with the MULTIPORT feature and
// one port, named, that carries a byte stream each way: the guest's
// transmitted buffers go to out on the vCPU thread, in the notify write;
// host bytes queued with Feed go into the guest's receive buffers on the
// vCPU thread too, when the guest next reads the ISR (which Feed's
// interrupt makes it do) or kicks the receive queue. Feed itself touches
// no guest RAM, so host goroutines may call it while the vCPU runs.
type Console struct {
	mem     Memory
	out     io.Writer
	name    string
	irqLine uint8

	mu                                sync.Mutex
	vio                               virtioPCI
	deviceReady, portReady, guestOpen bool
	ctrl                              [][]byte
	rx                                []byte // pending bytes are rx[rxHead:]
	rxHead                            int
	stats                             ConsoleStats
	rd, wr                            []segment // scratch for one chain
}

var (
	_ PCIDevice    = (*Console)(nil)
	_ virtioDevice = (*Console)(nil)
)

// NewConsole returns a console whose port is called name (1 to
// ConsoleNameMax printable ASCII bytes, no space: what the guest reads in
// /sys/class/virtio-ports/*/name). The device reaches guest RAM through
// mem and interrupts through irq (nil: unconnected) on PIC line irqLine,
// and sends what the guest transmits to out, which must not block and must
// not call back into the device (nil discards).
func NewConsole(name string, mem Memory, irq IRQ, irqLine uint8, out io.Writer) (*Console, error) {
	if mem == nil {
		return nil, fmt.Errorf("devices: new console: nil memory: %w", ErrBadConfig)
	}
	if len(name) == 0 || len(name) > ConsoleNameMax {
		return nil, fmt.Errorf("devices: new console: port name %q: want 1 to %d bytes: %w", name, ConsoleNameMax, ErrBadConfig)
	}
	for i := range len(name) {
		if name[i] <= ' ' || name[i] > '~' {
			return nil, fmt.Errorf("devices: new console: port name %q: byte %#x is not printable ASCII: %w", name, name[i], ErrBadConfig)
		}
	}
	if out == nil {
		out = io.Discard
	}
	sizes := make([]uint16, consoleQueues)
	for i := range sizes {
		sizes[i] = ConsoleQueueSize
	}
	return &Console{
		mem:     mem,
		out:     out,
		name:    name,
		irqLine: irqLine,
		vio:     newVirtioPCI("console", ConsoleFeatures, ConsoleIOSize, irq, sizes...),
	}, nil
}

// PCIConfig implements PCIDevice.
func (c *Console) PCIConfig() PCIConfig {
	return PCIConfig{
		VendorID:          VirtioVendorID,
		DeviceID:          VirtioConsoleDeviceID,
		SubsystemVendorID: VirtioVendorID,
		SubsystemID:       VirtioConsoleType,
		Class:             consoleClass,
		IOSize:            ConsoleIOSize,
		IRQ:               c.irqLine,
	}
}

// Name returns the port's name.
func (c *Console) Name() string { return c.name }

// GuestOpen says whether a guest program has the port open (the driver's
// last PORT_OPEN said so).
func (c *Console) GuestOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.guestOpen
}

// Stats returns the device's counters.
func (c *Console) Stats() ConsoleStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Feed queues p for the guest to receive. It takes all of p or, returning
// an error wrapping ErrRXFull, none of it. It writes no guest RAM: when the
// guest can take data (the driver is ready and, with MULTIPORT, the port is
// open) it raises the queue interrupt, and the bytes go into the receive
// buffers when the guest reads the ISR.
func (c *Console) Feed(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.rxLen(); len(p) > ConsoleRXLimit-q {
		return fmt.Errorf("devices: console: feed %d bytes with %d queued: %w", len(p), q, ErrRXFull)
	}
	if len(p) == 0 {
		return nil
	}
	c.compactRX()
	c.rx = append(c.rx, p...)
	if c.rxOpen() {
		c.vio.isr |= isrQueue
	}
	return c.vio.updateIRQ()
}

// ReadBAR implements PCIDevice. A read of the ISR first puts pending host
// data and control messages into the guest's buffers (so the interrupt Feed
// raised finds them), then clears the ISR and lowers the interrupt.
func (c *Console) ReadBAR(off uint16, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if off <= vioISR && int(off)+len(data) > vioISR {
		c.deliverCtrl()
		c.deliverRX()
	}
	return c.vio.read(c, off, data)
}

// WriteBAR implements PCIDevice.
func (c *Console) WriteBAR(off uint16, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vio.write(c, off, data)
}

// config implements virtioDevice: struct virtio_console_config (cols,
// rows: 0, F_SIZE is not offered; max_nr_ports 1; emerg_wr 0).
func (c *Console) config(cfg []byte) {
	binary.LittleEndian.PutUint32(cfg[4:], 1)
}

// notify implements virtioDevice.
func (c *Console) notify(q int) {
	switch q {
	case consoleRXQ:
		c.deliverRX()
	case consoleTXQ:
		c.transmit()
	case consoleCtrlRXQ:
		c.deliverCtrl()
	case consoleCtrlTXQ:
		c.control()
	}
}

// driverOK implements virtioDevice: the receive queues may already hold
// buffers (Linux fills them before it kicks), and they get NO_NOTIFY while
// the device has nothing for them.
func (c *Console) driverOK() {
	c.deliverCtrl()
	c.deliverRX()
}

// reset implements virtioDevice: the ports and pending messages go, and
// the host bytes not yet delivered are discarded (counted).
func (c *Console) reset() {
	c.stats.RXDiscarded += uint64(c.rxLen())
	c.rx, c.rxHead = c.rx[:0], 0
	c.ctrl = nil
	c.deviceReady, c.portReady, c.guestOpen = false, false, false
}

func (c *Console) multiport() bool { return c.vio.guestFeatures&consoleFMultiport != 0 }

// rxOpen says whether host bytes may go to the guest: the receive queue
// is usable and, with MULTIPORT, a guest program has the port open (Linux
// discards data arriving on a port nobody has open).
func (c *Console) rxOpen() bool {
	return c.vio.usable(consoleRXQ) && (!c.multiport() || c.guestOpen)
}

func (c *Console) rxLen() int { return len(c.rx) - c.rxHead }

// compactRX moves the pending bytes to the front once the consumed prefix
// dominates, so the queue's memory stays bounded.
func (c *Console) compactRX() {
	if c.rxHead == 0 {
		return
	}
	if c.rxHead == len(c.rx) {
		c.rx, c.rxHead = c.rx[:0], 0
		return
	}
	if c.rxHead >= 4096 && c.rxHead >= len(c.rx)/2 {
		n := copy(c.rx, c.rx[c.rxHead:])
		c.rx, c.rxHead = c.rx[:n], 0
	}
}

// fail stops the device (virtioPCI.fail) and counts it.
func (c *Console) fail() {
	c.vio.fail()
	c.stats.Errors++
}

// pop takes the next available chain of r into c.rd and c.wr: its head and
// true, or false after stopping the device on a broken ring or chain.
func (c *Console) pop(r vring) (uint16, bool) {
	head, ok := r.head()
	if !ok {
		c.fail()
		return 0, false
	}
	var err error
	if c.rd, c.wr, err = walkChain(c.mem, r, head, c.rd, c.wr); err != nil || !allOK(c.rd) || !allOK(c.wr) {
		c.fail()
		return 0, false
	}
	return head, true
}

// take returns queue q's ring and the number of chains pending in it, or
// false (the device stopped) when the ring is not in RAM or its index is
// impossible.
func (c *Console) take(q int) (vring, uint16, bool) {
	r, err := c.vio.queues[q].ring(c.mem)
	if err != nil {
		c.fail()
		return r, 0, false
	}
	n, ok := r.pending()
	if !ok {
		c.fail()
	}
	return r, n, ok
}
