package devices

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The legacy (virtio 0.9.5) PCI transport and split virtqueues, shared by
// the virtio devices (Block, Console): the common registers at the start of
// BAR0, feature negotiation, the status register, the ISR and its interrupt
// line, queue selection and notification, and the rings in guest RAM.

// VirtioVendorID is the PCI vendor ID of every virtio device.
const VirtioVendorID = 0x1af4

// Legacy virtio PCI register offsets (virtio 0.9.5, no MSI-X).
const (
	vioHostFeatures  = 0
	vioGuestFeatures = 4
	vioQueuePFN      = 8
	vioQueueNum      = 12
	vioQueueSel      = 14
	vioQueueNotify   = 16
	vioStatus        = 18
	vioISR           = 19
	vioConfig        = 20 // the device-specific configuration starts here

	vioPageShift = 12 // the queue PFN's unit
	vioRingAlign = 4096
)

// Device status bits (the status register at BAR0 offset 18).
const (
	StatusAcknowledge = 0x01 // the guest noticed the device
	StatusDriver      = 0x02 // the guest has a driver for it
	StatusDriverOK    = 0x04 // the driver is ready: the device may use the queue
	StatusFeaturesOK  = 0x08 // virtio 1.0 only; a legacy driver never sets it
	StatusNeedsReset  = 0x40 // the device stopped on a broken queue; reset it
	StatusFailed      = 0x80 // the driver gave up on the device
)

// ISR bits.
const (
	isrQueue  = 0x01
	isrConfig = 0x02
)

// Split ring layout (mirrors struct vring_desc, vring_avail, vring_used).
const (
	descSize      = 16
	descFNext     = 1
	descFWrite    = 2
	descFIndirect = 4
	availFNoIntr  = 1 // VRING_AVAIL_F_NO_INTERRUPT
	usedFNoNotify = 1 // VRING_USED_F_NO_NOTIFY
)

// vringLayout is where the parts of a legacy split ring of some size lie,
// in bytes from the queue's base (PFN << 12): the descriptor table, the
// available ring right after it, the used ring at the next 4 KiB boundary.
type vringLayout struct {
	descBytes, availBytes, usedOff, usedBytes uint64
}

func layoutOf(size uint16) vringLayout {
	n := uint64(size)
	l := vringLayout{
		descBytes:  descSize * n,
		availBytes: 2 * (3 + n), // flags, idx, ring, used_event
		usedBytes:  2*3 + 8*n,   // flags, idx, ring, avail_event
	}
	l.usedOff = (l.descBytes + l.availBytes + vioRingAlign - 1) &^ (vioRingAlign - 1)
	return l
}

// virtqueue is one split queue as the device tracks it: its size (fixed
// by the device: the legacy driver cannot change it), where the driver put
// it, and the device's two cursors. The used index is the device's own
// copy, not the guest-writable one in RAM.
type virtqueue struct {
	size      uint16
	pfn       uint32 // 0: not set up
	lastAvail uint16 // the next available-ring index the device consumes
	usedIdx   uint16
}

// VirtqueueState is one virtqueue's part of a device's state.
type VirtqueueState struct {
	// Size is the queue's number of entries (a constant of the device,
	// saved so that SetState can refuse a state from another device).
	Size uint16
	// PFN is the queue's guest-physical address in 4 KiB pages; 0 when the
	// queue is not set up.
	PFN uint32
	// LastAvailIdx is the next available-ring index the device will consume.
	LastAvailIdx uint16
	// UsedIdx is the device's used-ring index.
	UsedIdx uint16
}

func (q *virtqueue) state() VirtqueueState {
	return VirtqueueState{Size: q.size, PFN: q.pfn, LastAvailIdx: q.lastAvail, UsedIdx: q.usedIdx}
}

// vring is a queue's three parts in guest RAM, taken anew for each batch
// of work (Memory.Slice marks them dirty) and never kept past it.
type vring struct {
	q                 *virtqueue
	desc, avail, used []byte
}

// ring takes q's parts from mem; it fails when they are not all in RAM.
func (q *virtqueue) ring(mem Memory) (vring, error) {
	base := uint64(q.pfn) << vioPageShift
	l := layoutOf(q.size)
	r := vring{q: q}
	var err error
	if r.desc, err = mem.Slice(base, l.descBytes); err != nil {
		return r, err
	}
	if r.avail, err = mem.Slice(base+l.descBytes, l.availBytes); err != nil {
		return r, err
	}
	r.used, err = mem.Slice(base+l.usedOff, l.usedBytes)
	return r, err
}

// pending is the number of chains the driver made available that the
// device has not consumed, read once; false when the available index is
// impossible (more than the ring holds).
func (r vring) pending() (uint16, bool) {
	n := binary.LittleEndian.Uint16(r.avail[2:]) - r.q.lastAvail
	return n, n <= r.q.size
}

// head is the chain at the next available index; false when the driver
// put an index outside the descriptor table there.
func (r vring) head() (uint16, bool) {
	slot := r.q.lastAvail % r.q.size
	h := binary.LittleEndian.Uint16(r.avail[4+2*slot:])
	return h, h < r.q.size
}

// complete puts head in the used ring with n bytes written and moves both
// cursors on.
func (r vring) complete(head uint16, n uint32) {
	e := r.used[4+8*(r.q.usedIdx%r.q.size):]
	binary.LittleEndian.PutUint32(e[0:], uint32(head))
	binary.LittleEndian.PutUint32(e[4:], n)
	r.q.usedIdx++
	binary.LittleEndian.PutUint16(r.used[2:], r.q.usedIdx)
	r.q.lastAvail++
}

// interruptible says whether the driver wants an interrupt for completed
// chains (VRING_AVAIL_F_NO_INTERRUPT clear).
func (r vring) interruptible() bool {
	return binary.LittleEndian.Uint16(r.avail[0:])&availFNoIntr == 0
}

// setNoNotify sets or clears VRING_USED_F_NO_NOTIFY: the device's advice
// that the driver need not notify it when it adds buffers.
func (r vring) setNoNotify(on bool) {
	f := binary.LittleEndian.Uint16(r.used[0:]) &^ usedFNoNotify
	if on {
		f |= usedFNoNotify
	}
	binary.LittleEndian.PutUint16(r.used[0:], f)
}

// segment is one descriptor's buffer: n bytes, in buf when ok (in RAM).
type segment struct {
	buf []byte
	n   uint32
	ok  bool
}

// errChain: the descriptor chain's structure is broken.
var errChain = errors.New("broken descriptor chain")

// walkChain collects the chain from head in r's descriptor table into rd
// (readable buffers) and wr (writable ones, which must come last), reusing
// their storage. It fails on a broken structure: an index out of range, a
// loop or a chain longer than the queue, an indirect descriptor (not
// offered), a readable buffer after a writable one. A buffer outside RAM is
// recorded as not ok.
func walkChain(mem Memory, r vring, head uint16, rd, wr []segment) ([]segment, []segment, error) {
	rd, wr = rd[:0], wr[:0]
	size := r.q.size
	idx := head
	for n := 0; ; n++ {
		if n == int(size) {
			return rd, wr, errChain
		}
		d := r.desc[descSize*int(idx):]
		addr := binary.LittleEndian.Uint64(d[0:])
		length := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])
		if flags&descFIndirect != 0 {
			return rd, wr, errChain
		}
		buf, err := mem.Slice(addr, uint64(length))
		s := segment{buf: buf, n: length, ok: err == nil}
		if flags&descFWrite != 0 {
			wr = append(wr, s)
		} else {
			if len(wr) > 0 {
				return rd, wr, errChain
			}
			rd = append(rd, s)
		}
		if flags&descFNext == 0 {
			return rd, wr, nil
		}
		if next >= size {
			return rd, wr, errChain
		}
		idx = next
	}
}

// virtioDevice is what a device adds to the transport. The transport calls
// it with the device's mutex held.
type virtioDevice interface {
	// config fills the device-specific configuration (BAR0 from offset 20).
	config(c []byte)
	// notify handles the driver's kick of queue q (a valid index).
	notify(q int)
	// driverOK runs when DRIVER_OK turns on (the driver may have kicked
	// before, or filled receive queues without kicking).
	driverOK()
	// reset runs after the driver reset the device (status 0), once the
	// transport has reset itself.
	reset()
}

// virtioPCI is the legacy virtio-pci transport: the common registers, the
// queues and the interrupt line (level: ISR != 0). It is not safe for
// concurrent use; the device embedding it holds its mutex.
type virtioPCI struct {
	name     string // for errors: "block", "console"
	features uint32 // offered
	ioSize   uint16 // BAR0's size: the common registers and the config
	irq      IRQ
	queues   []virtqueue

	guestFeatures uint32
	queueSel      uint16
	status        uint8
	isr           uint8
	level         bool // the level last set on irq
}

// newVirtioPCI returns a transport with queues of the given sizes.
func newVirtioPCI(name string, features uint32, ioSize uint16, irq IRQ, sizes ...uint16) virtioPCI {
	t := virtioPCI{name: name, features: features, ioSize: ioSize, irq: irq}
	for _, s := range sizes {
		t.queues = append(t.queues, virtqueue{size: s})
	}
	return t
}

func (t *virtioPCI) checkAccess(off uint16, n int) error {
	if (n != 1 && n != 2 && n != 4) || int(off)+n > int(t.ioSize) {
		return fmt.Errorf("devices: %s: %d-byte access at BAR offset %#x: %w", t.name, n, off, ErrBadAccess)
	}
	return nil
}

// read serves a BAR0 read. Reading the ISR clears it and lowers the line.
func (t *virtioPCI) read(dev virtioDevice, off uint16, data []byte) error {
	if err := t.checkAccess(off, len(data)); err != nil {
		return err
	}
	var buf [PCIIOStride]byte // ioSize is at most PCIIOStride (PCIBus.Add)
	regs := buf[:t.ioSize]
	binary.LittleEndian.PutUint32(regs[vioHostFeatures:], t.features)
	binary.LittleEndian.PutUint32(regs[vioGuestFeatures:], t.guestFeatures)
	if q := t.selected(); q != nil {
		binary.LittleEndian.PutUint32(regs[vioQueuePFN:], q.pfn)
		binary.LittleEndian.PutUint16(regs[vioQueueNum:], q.size)
	}
	binary.LittleEndian.PutUint16(regs[vioQueueSel:], t.queueSel)
	regs[vioStatus] = t.status
	regs[vioISR] = t.isr
	dev.config(regs[vioConfig:])
	copy(data, regs[off:])
	if off <= vioISR && int(off)+len(data) > vioISR {
		t.isr = 0
		return t.updateIRQ()
	}
	return nil
}

// selected is the queue the select register names, or nil.
func (t *virtioPCI) selected() *virtqueue {
	if int(t.queueSel) < len(t.queues) {
		return &t.queues[t.queueSel]
	}
	return nil
}

// write serves a BAR0 write. A write that covers part of a register changes
// those bytes of it; writes to read-only registers and to the config are
// ignored. Registers are taken in offset order: a notify in the same write
// as a status change is served first.
func (t *virtioPCI) write(dev virtioDevice, off uint16, data []byte) error {
	if err := t.checkAccess(off, len(data)); err != nil {
		return err
	}
	// merge returns old (a register of n bytes at reg) with the bytes this
	// write covers replaced, and whether it covers any.
	merge := func(old uint32, reg, n int) (uint32, bool) {
		var buf [4]byte
		binary.LittleEndian.PutUint32(buf[:], old)
		hit := false
		for i, v := range data {
			if p := int(off) + i; p >= reg && p < reg+n {
				buf[p-reg] = v
				hit = true
			}
		}
		return binary.LittleEndian.Uint32(buf[:]), hit
	}
	if v, ok := merge(t.guestFeatures, vioGuestFeatures, 4); ok {
		t.guestFeatures = v & t.features
	}
	if q := t.selected(); q != nil {
		if v, ok := merge(q.pfn, vioQueuePFN, 4); ok {
			q.pfn = v
		}
	}
	if v, ok := merge(uint32(t.queueSel), vioQueueSel, 2); ok {
		t.queueSel = uint16(v)
	}
	if v, ok := merge(0, vioQueueNotify, 2); ok && int(v) < len(t.queues) {
		dev.notify(int(v))
	}
	if v, ok := merge(uint32(t.status), vioStatus, 1); ok {
		t.setStatus(dev, uint8(v))
	}
	return t.updateIRQ()
}

// setStatus handles a device status write: 0 resets the device; otherwise
// the driver's bits are taken (NEEDS_RESET stays until reset), and the
// device hears when DRIVER_OK turns on.
func (t *virtioPCI) setStatus(dev virtioDevice, v uint8) {
	if v == 0 {
		t.reset()
		dev.reset()
		return
	}
	was := t.status
	t.status = v&^StatusNeedsReset | was&StatusNeedsReset
	if t.status&StatusDriverOK != 0 && was&StatusDriverOK == 0 {
		dev.driverOK()
	}
}

// reset returns the transport to its power-on state.
func (t *virtioPCI) reset() {
	t.guestFeatures, t.queueSel, t.status, t.isr = 0, 0, 0, 0
	for i := range t.queues {
		t.queues[i] = virtqueue{size: t.queues[i].size}
	}
}

// usable says whether the device may use queue q: the driver is ready, the
// device is not stopped, and the queue is set up.
func (t *virtioPCI) usable(q int) bool {
	return t.status&StatusNeedsReset == 0 && t.status&StatusDriverOK != 0 && t.queues[q].pfn != 0
}

// fail stops the device: the driver broke a queue's rules so that a chain
// cannot even be completed. NEEDS_RESET stays until the driver resets the
// device; a config interrupt tells it.
func (t *virtioPCI) fail() {
	t.status |= StatusNeedsReset
	t.isr |= isrConfig
}

// updateIRQ sets the line to ISR != 0 if that changed. On error the
// recorded level stays, so the next update tries again.
func (t *virtioPCI) updateIRQ() error {
	want := t.isr != 0
	if want == t.level {
		return nil
	}
	if t.irq != nil {
		if err := t.irq.SetLevel(want); err != nil {
			return fmt.Errorf("devices: %s: set irq level %v: %w", t.name, want, err)
		}
	}
	t.level = want
	return nil
}

// forceIRQ drives the line to the level the ISR implies, whatever it was
// (SetState).
func (t *virtioPCI) forceIRQ() error {
	want := t.isr != 0
	if t.irq != nil {
		if err := t.irq.SetLevel(want); err != nil {
			t.level = !want // unknown: make the next update set it again
			return fmt.Errorf("devices: %s set state: set irq level %v: %w", t.name, want, err)
		}
	}
	t.level = want
	return nil
}

// setQueues replaces the queues' registers and cursors with qs, which must
// match the device's queues in number and size.
func (t *virtioPCI) setQueues(qs []VirtqueueState) error {
	if len(qs) != len(t.queues) {
		return fmt.Errorf("devices: %s set state: %d queues, the device has %d: %w", t.name, len(qs), len(t.queues), ErrBadState)
	}
	for i, q := range qs {
		if q.Size != t.queues[i].size {
			return fmt.Errorf("devices: %s set state: queue %d of size %d, the device's has %d: %w", t.name, i, q.Size, t.queues[i].size, ErrBadState)
		}
	}
	for i, q := range qs {
		t.queues[i] = virtqueue{size: q.Size, pfn: q.PFN, lastAvail: q.LastAvailIdx, usedIdx: q.UsedIdx}
	}
	return nil
}

// queueStates returns every queue's state.
func (t *virtioPCI) queueStates() []VirtqueueState {
	out := make([]VirtqueueState, len(t.queues))
	for i := range t.queues {
		out[i] = t.queues[i].state()
	}
	return out
}

// gather copies the first len(dst) bytes of segs into dst and returns the
// total length of segs.
func gather(dst []byte, segs []segment) uint64 {
	var n uint64
	for _, s := range segs {
		copy(dst[min(n, uint64(len(dst))):], s.buf)
		n += uint64(len(s.buf))
	}
	return n
}

func total(segs []segment) uint64 {
	var n uint64
	for _, s := range segs {
		n += uint64(len(s.buf))
	}
	return n
}

// skip returns segs without their first n bytes, reslicing segs in place.
func skip(segs []segment, n uint64) []segment {
	for i := range segs {
		l := uint64(len(segs[i].buf))
		if n < l {
			segs[i].buf = segs[i].buf[n:]
			return segs[i:]
		}
		n -= l
	}
	return nil
}

// allOK says whether every segment is in RAM.
func allOK(segs []segment) bool {
	for _, s := range segs {
		if !s.ok {
			return false
		}
	}
	return true
}
