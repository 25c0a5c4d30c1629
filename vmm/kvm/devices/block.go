package devices

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Backend is the storage behind a Block device.
type Backend interface {
	io.ReaderAt
	io.WriterAt
	// Size returns the size in bytes; Block reads it once, in NewBlock.
	Size() int64
	// Flush makes completed writes durable.
	Flush() error
}

// Virtio legacy PCI identity of a block device.
const (
	// VirtioVendorID is the PCI vendor ID of every virtio device.
	VirtioVendorID = 0x1af4
	// VirtioBlockDeviceID is the transitional PCI device ID of virtio-blk.
	VirtioBlockDeviceID = 0x1001
	// VirtioBlockType is the virtio device type of a block device, in the
	// PCI subsystem ID.
	VirtioBlockType = 2
	// BlockIOSize is the size of the legacy register block (BAR0), in bytes.
	BlockIOSize = 0x40
	// BlockQueueSize is the number of entries of the device's one queue.
	BlockQueueSize = 256
	// BlockSectorSize is the unit of capacity and request sectors, in bytes.
	BlockSectorSize = 512
	// BlockSerialLen is the longest serial a Block accepts (VIRTIO_BLK_ID_BYTES).
	BlockSerialLen = 20
	// BlockSegMax is the most data segments per request the device
	// advertises (seg_max); with the header and status a request fits in
	// half the ring.
	BlockSegMax = BlockQueueSize/2 - 2

	blockClass = 0x018000 // mass storage, other
)

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
	vioConfig        = 20

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

// Feature bits (mirrors include/uapi/linux/virtio_blk.h).
const (
	blkFSegMax  = 1 << 2
	blkFBlkSize = 1 << 6
	blkFFlush   = 1 << 9
	// BlockFeatures is what a Block offers: SEG_MAX, BLK_SIZE, FLUSH.
	BlockFeatures = blkFSegMax | blkFBlkSize | blkFFlush
)

// Split ring layout (mirrors struct vring_desc, vring_avail, vring_used).
const (
	descSize         = 16
	descFNext        = 1
	descFWrite       = 2
	descFIndirect    = 4
	availFNoIntr     = 1
	availRingSize    = 2 * (3 + BlockQueueSize) // flags, idx, ring, used_event
	usedRingSize     = 2*3 + 8*BlockQueueSize   // flags, idx, ring, avail_event
	descTableSize    = descSize * BlockQueueSize
	usedRingOffset   = (descTableSize + availRingSize + vioRingAlign - 1) &^ (vioRingAlign - 1)
	blkReqHeaderSize = 16 // struct virtio_blk_outhdr
)

// Request types and status codes.
const (
	blkTIn    = 0
	blkTOut   = 1
	blkTFlush = 4
	blkTGetID = 8

	blkSOK     = 0
	blkSIOErr  = 1
	blkSUnsupp = 2
)

// BlockStats counts a Block device's work.
type BlockStats struct {
	// Requests is the number of descriptor chains completed.
	Requests uint64
	// BytesRead is the number of bytes read from the backend for the guest.
	BytesRead uint64
	// BytesWritten is the number of bytes written to the backend.
	BytesWritten uint64
	// Errors is the number of requests completed with an error status, plus
	// the times the device stopped with NEEDS_RESET.
	Errors uint64
}

// BlockState is a Block device's complete state, for checkpoints.
// HostFeatures, QueueSize and Capacity are constants of the device, saved so
// that SetState can refuse a state from a different device.
type BlockState struct {
	// HostFeatures is the feature bits the device offers.
	HostFeatures uint32
	// GuestFeatures is the feature bits the driver accepted.
	GuestFeatures uint32
	// QueuePFN is the queue's guest-physical address in 4 KiB pages; 0 when
	// the queue is not set up.
	QueuePFN uint32
	// QueueSize is the queue's number of entries.
	QueueSize uint16
	// QueueSelect is the queue select register.
	QueueSelect uint16
	// Status is the device status register.
	Status uint8
	// ISR is the interrupt status register (bit 0 queue, bit 1 config).
	ISR uint8
	// LastAvailIdx is the next available-ring index the device will consume.
	LastAvailIdx uint16
	// UsedIdx is the device's used-ring index (its own copy, not the
	// guest-writable one in RAM).
	UsedIdx uint16
	// Capacity is the disk size in 512-byte sectors.
	Capacity uint64
}

// Block is a legacy virtio-pci block device with one split virtqueue. The
// vCPU thread's notify write processes every available request
// synchronously, backend I/O included.
type Block struct {
	backend  Backend
	mem      Memory
	irq      IRQ
	irqLine  uint8
	serial   [BlockSerialLen]byte
	capacity uint64 // in sectors

	mu            sync.Mutex
	guestFeatures uint32
	queuePFN      uint32
	queueSel      uint16
	status        uint8
	isr           uint8
	lastAvail     uint16
	usedIdx       uint16
	level         bool
	stats         BlockStats
	rd, wr        []segment // scratch for one chain
}

var _ PCIDevice = (*Block)(nil)

// NewBlock returns a block device on backend whose capacity is
// backend.Size() rounded down to whole sectors. serial (at most
// BlockSerialLen bytes, no NUL) is what VIRTIO_BLK_T_GET_ID returns and what
// Linux shows in /sys/block/vdX/serial. The device reaches guest RAM
// through mem and interrupts through irq (nil: unconnected) on PIC line
// irqLine.
func NewBlock(backend Backend, serial string, mem Memory, irq IRQ, irqLine uint8) (*Block, error) {
	if backend == nil || mem == nil {
		return nil, fmt.Errorf("devices: new block: nil backend or memory: %w", ErrBadConfig)
	}
	if len(serial) > BlockSerialLen {
		return nil, fmt.Errorf("devices: new block: serial %q longer than %d bytes: %w", serial, BlockSerialLen, ErrBadConfig)
	}
	for i := range len(serial) {
		if serial[i] == 0 {
			return nil, fmt.Errorf("devices: new block: serial %q contains NUL: %w", serial, ErrBadConfig)
		}
	}
	size := backend.Size()
	if size < 0 {
		return nil, fmt.Errorf("devices: new block: backend size %d: %w", size, ErrBadConfig)
	}
	b := &Block{
		backend:  backend,
		mem:      mem,
		irq:      irq,
		irqLine:  irqLine,
		capacity: uint64(size) / BlockSectorSize,
	}
	copy(b.serial[:], serial)
	return b, nil
}

// PCIConfig implements PCIDevice.
func (b *Block) PCIConfig() PCIConfig {
	return PCIConfig{
		VendorID:          VirtioVendorID,
		DeviceID:          VirtioBlockDeviceID,
		SubsystemVendorID: VirtioVendorID,
		SubsystemID:       VirtioBlockType,
		Class:             blockClass,
		IOSize:            BlockIOSize,
		IRQ:               b.irqLine,
	}
}

// Stats returns the device's counters.
func (b *Block) Stats() BlockStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// State returns the device's registers and queue cursors.
func (b *Block) State() BlockState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BlockState{
		HostFeatures:  BlockFeatures,
		GuestFeatures: b.guestFeatures,
		QueuePFN:      b.queuePFN,
		QueueSize:     BlockQueueSize,
		QueueSelect:   b.queueSel,
		Status:        b.status,
		ISR:           b.isr,
		LastAvailIdx:  b.lastAvail,
		UsedIdx:       b.usedIdx,
		Capacity:      b.capacity,
	}
}

// SetState replaces the device's registers and queue cursors with s and
// drives the interrupt line to the level s implies, whatever it was. Guest
// RAM and the backend are the caller's to restore.
func (b *Block) SetState(s BlockState) error {
	switch {
	case s.HostFeatures != BlockFeatures || s.QueueSize != BlockQueueSize:
		return fmt.Errorf("devices: block set state: features %#x, queue size %d (want %#x, %d): %w",
			s.HostFeatures, s.QueueSize, BlockFeatures, BlockQueueSize, ErrBadState)
	case s.Capacity != b.capacity:
		return fmt.Errorf("devices: block set state: capacity %d sectors, backend has %d: %w", s.Capacity, b.capacity, ErrBadState)
	case s.GuestFeatures&^BlockFeatures != 0 || s.ISR&^(isrQueue|isrConfig) != 0:
		return fmt.Errorf("devices: block set state: guest features %#x, ISR %#x: %w", s.GuestFeatures, s.ISR, ErrBadState)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.guestFeatures, b.queuePFN, b.queueSel = s.GuestFeatures, s.QueuePFN, s.QueueSelect
	b.status, b.isr = s.Status, s.ISR
	b.lastAvail, b.usedIdx = s.LastAvailIdx, s.UsedIdx
	want := b.isr != 0
	if b.irq != nil {
		if err := b.irq.SetLevel(want); err != nil {
			b.level = !want // unknown: make the next update set it again
			return fmt.Errorf("devices: block set state: set irq level %v: %w", want, err)
		}
	}
	b.level = want
	return nil
}

func checkBARAccess(off uint16, n int) error {
	if (n != 1 && n != 2 && n != 4) || int(off)+n > BlockIOSize {
		return fmt.Errorf("devices: block: %d-byte access at BAR offset %#x: %w", n, off, ErrBadAccess)
	}
	return nil
}

// ReadBAR implements PCIDevice. Reading the ISR clears it and lowers the
// interrupt.
func (b *Block) ReadBAR(off uint16, data []byte) error {
	if err := checkBARAccess(off, len(data)); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var regs [BlockIOSize]byte
	binary.LittleEndian.PutUint32(regs[vioHostFeatures:], BlockFeatures)
	binary.LittleEndian.PutUint32(regs[vioGuestFeatures:], b.guestFeatures)
	if b.queueSel == 0 {
		binary.LittleEndian.PutUint32(regs[vioQueuePFN:], b.queuePFN)
		binary.LittleEndian.PutUint16(regs[vioQueueNum:], BlockQueueSize)
	}
	binary.LittleEndian.PutUint16(regs[vioQueueSel:], b.queueSel)
	regs[vioStatus] = b.status
	regs[vioISR] = b.isr
	b.putConfig(regs[vioConfig:])
	copy(data, regs[off:])
	if off <= vioISR && int(off)+len(data) > vioISR {
		b.isr = 0
		return b.updateIRQ()
	}
	return nil
}

// putConfig writes struct virtio_blk_config (the part that fits in BAR0).
func (b *Block) putConfig(c []byte) {
	binary.LittleEndian.PutUint64(c[0:], b.capacity)
	// size_max (8) is 0: VIRTIO_BLK_F_SIZE_MAX is not offered.
	binary.LittleEndian.PutUint32(c[12:], BlockSegMax)
	// geometry (16) is 0: VIRTIO_BLK_F_GEOMETRY is not offered.
	binary.LittleEndian.PutUint32(c[20:], BlockSectorSize) // blk_size
}

// WriteBAR implements PCIDevice. A write that covers part of a register
// changes those bytes of it; writes to read-only registers are ignored.
func (b *Block) WriteBAR(off uint16, data []byte) error {
	if err := checkBARAccess(off, len(data)); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
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
	if v, ok := merge(b.guestFeatures, vioGuestFeatures, 4); ok {
		b.guestFeatures = v & BlockFeatures
	}
	if v, ok := merge(b.queuePFN, vioQueuePFN, 4); ok && b.queueSel == 0 {
		b.queuePFN = v
	}
	if v, ok := merge(uint32(b.queueSel), vioQueueSel, 2); ok {
		b.queueSel = uint16(v)
	}
	if v, ok := merge(0, vioQueueNotify, 2); ok && v == 0 {
		b.process()
	}
	if v, ok := merge(uint32(b.status), vioStatus, 1); ok {
		b.setStatus(uint8(v))
	}
	return b.updateIRQ()
}

// setStatus handles a device status write: 0 resets the device; otherwise
// the driver's bits are taken (NEEDS_RESET stays until reset), and the queue
// is processed when DRIVER_OK turns on, in case the driver kicked early.
func (b *Block) setStatus(v uint8) {
	if v == 0 {
		b.reset()
		return
	}
	was := b.status
	b.status = v&^StatusNeedsReset | was&StatusNeedsReset
	if b.status&StatusDriverOK != 0 && was&StatusDriverOK == 0 {
		b.process()
	}
}

// reset returns the device to its power-on state (counters stay).
func (b *Block) reset() {
	b.guestFeatures, b.queuePFN, b.queueSel = 0, 0, 0
	b.status, b.isr = 0, 0
	b.lastAvail, b.usedIdx = 0, 0
}

// updateIRQ sets the line to ISR != 0 if that changed. On error the
// recorded level stays, so the next update tries again.
func (b *Block) updateIRQ() error {
	want := b.isr != 0
	if want == b.level {
		return nil
	}
	if b.irq != nil {
		if err := b.irq.SetLevel(want); err != nil {
			return fmt.Errorf("devices: block: set irq level %v: %w", want, err)
		}
	}
	b.level = want
	return nil
}

// fail stops the device: the driver broke the queue's rules so that a
// request cannot even be completed. NEEDS_RESET stays until the driver
// resets the device; a config interrupt tells it.
func (b *Block) fail() {
	b.status |= StatusNeedsReset
	b.isr |= isrConfig
	b.stats.Errors++
}

// ring is the queue's three parts in guest RAM.
type ring struct {
	desc, avail, used []byte
}

func (b *Block) ring() (ring, error) {
	base := uint64(b.queuePFN) << vioPageShift
	var r ring
	var err error
	if r.desc, err = b.mem.Slice(base, descTableSize); err != nil {
		return r, err
	}
	if r.avail, err = b.mem.Slice(base+descTableSize, availRingSize); err != nil {
		return r, err
	}
	r.used, err = b.mem.Slice(base+usedRingOffset, usedRingSize)
	return r, err
}

// process completes every request the driver has made available, in order.
// It reads the available index once: requests the guest adds later wait for
// the next notify.
func (b *Block) process() {
	if b.status&StatusNeedsReset != 0 || b.status&StatusDriverOK == 0 || b.queuePFN == 0 {
		return
	}
	r, err := b.ring()
	if err != nil {
		b.fail()
		return
	}
	pending := binary.LittleEndian.Uint16(r.avail[2:]) - b.lastAvail
	if pending > BlockQueueSize {
		b.fail() // more than the ring holds: the index is garbage
		return
	}
	done := 0
	for ; pending > 0; pending-- {
		slot := b.lastAvail % BlockQueueSize
		head := binary.LittleEndian.Uint16(r.avail[4+2*slot:])
		if head >= BlockQueueSize {
			b.fail()
			break
		}
		n, ok := b.serve(r.desc, head)
		if !ok {
			b.fail()
			break
		}
		e := r.used[4+8*(b.usedIdx%BlockQueueSize):]
		binary.LittleEndian.PutUint32(e[0:], uint32(head))
		binary.LittleEndian.PutUint32(e[4:], n)
		b.usedIdx++
		binary.LittleEndian.PutUint16(r.used[2:], b.usedIdx)
		b.lastAvail++
		b.stats.Requests++
		done++
	}
	if done > 0 && binary.LittleEndian.Uint16(r.avail[0:])&availFNoIntr == 0 {
		b.isr |= isrQueue
	}
}

// segment is one descriptor's buffer: n bytes, in buf when ok (in RAM).
type segment struct {
	buf []byte
	n   uint32
	ok  bool
}

// errChain: the descriptor chain's structure is broken.
var errChain = errors.New("broken descriptor chain")

// walk collects the chain from head: readable buffers, then writable ones.
// It fails on a broken structure (index out of range, a loop or a chain
// longer than the queue, an indirect descriptor, a readable buffer after a
// writable one); a buffer outside RAM is recorded as not ok.
func (b *Block) walk(desc []byte, head uint16) error {
	b.rd, b.wr = b.rd[:0], b.wr[:0]
	idx := head
	for n := 0; ; n++ {
		if n == BlockQueueSize {
			return errChain
		}
		d := desc[descSize*int(idx):]
		addr := binary.LittleEndian.Uint64(d[0:])
		length := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])
		if flags&descFIndirect != 0 {
			return errChain // VIRTIO_RING_F_INDIRECT_DESC is not offered
		}
		buf, err := b.mem.Slice(addr, uint64(length))
		s := segment{buf: buf, n: length, ok: err == nil}
		if flags&descFWrite != 0 {
			b.wr = append(b.wr, s)
		} else {
			if len(b.wr) > 0 {
				return errChain
			}
			b.rd = append(b.rd, s)
		}
		if flags&descFNext == 0 {
			return nil
		}
		if next >= BlockQueueSize {
			return errChain
		}
		idx = next
	}
}

// serve runs the request whose chain starts at head and returns the used
// length (bytes written to the chain), or false if it cannot be completed:
// the chain is broken or has no writable status byte in RAM.
func (b *Block) serve(desc []byte, head uint16) (uint32, bool) {
	if err := b.walk(desc, head); err != nil {
		return 0, false
	}
	// The status byte is the last byte of the last non-empty writable buffer.
	last := len(b.wr) - 1
	for last >= 0 && b.wr[last].n == 0 {
		last--
	}
	if last < 0 || !b.wr[last].ok {
		return 0, false
	}
	sbuf := b.wr[last].buf
	status := sbuf[len(sbuf)-1:]
	b.wr[last].buf = sbuf[:len(sbuf)-1]
	b.wr = b.wr[:last+1]

	code, n := b.execute()
	status[0] = code
	if code != blkSOK {
		b.stats.Errors++
	}
	return uint32(n) + 1, true
}

// execute performs the request in b.rd/b.wr (status byte excluded) and
// returns its status and the number of data bytes written to the guest.
func (b *Block) execute() (uint8, uint64) {
	for _, s := range b.rd {
		if !s.ok {
			return blkSIOErr, 0
		}
	}
	for _, s := range b.wr {
		if !s.ok {
			return blkSIOErr, 0
		}
	}
	var hdr [blkReqHeaderSize]byte
	data := gather(hdr[:], b.rd)
	if data < blkReqHeaderSize {
		return blkSIOErr, 0
	}
	typ := binary.LittleEndian.Uint32(hdr[0:])
	sector := binary.LittleEndian.Uint64(hdr[8:])
	switch typ {
	case blkTIn:
		return b.read(sector)
	case blkTOut:
		return b.write(sector), 0
	case blkTFlush:
		if err := b.backend.Flush(); err != nil {
			return blkSIOErr, 0
		}
		return blkSOK, 0
	case blkTGetID:
		id := b.serial[:]
		var n uint64
		for _, s := range b.wr {
			c := copy(s.buf, id)
			id = id[c:]
			n += uint64(c)
		}
		return blkSOK, n
	default:
		return blkSUnsupp, 0
	}
}

// read serves VIRTIO_BLK_T_IN into the writable buffers.
func (b *Block) read(sector uint64) (uint8, uint64) {
	off, ok := b.span(sector, total(b.wr))
	if !ok {
		return blkSIOErr, 0
	}
	var done uint64
	for _, s := range b.wr {
		n, err := b.backend.ReadAt(s.buf, off)
		done += uint64(n)
		b.stats.BytesRead += uint64(n)
		if n < len(s.buf) || (err != nil && !errors.Is(err, io.EOF)) {
			return blkSIOErr, done
		}
		off += int64(n)
	}
	return blkSOK, done
}

// write serves VIRTIO_BLK_T_OUT from the readable buffers after the header.
func (b *Block) write(sector uint64) uint8 {
	segs := skip(b.rd, blkReqHeaderSize)
	off, ok := b.span(sector, total(segs))
	if !ok {
		return blkSIOErr
	}
	for _, s := range segs {
		p := s.buf
		n, err := b.backend.WriteAt(p, off)
		b.stats.BytesWritten += uint64(n)
		if err != nil || n < len(p) {
			return blkSIOErr
		}
		off += int64(n)
	}
	return blkSOK
}

// span checks that n bytes from sector are whole sectors within the disk
// and returns their byte offset.
func (b *Block) span(sector, n uint64) (int64, bool) {
	if n%BlockSectorSize != 0 || sector > b.capacity || n/BlockSectorSize > b.capacity-sector {
		return 0, false
	}
	return int64(sector * BlockSectorSize), true
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
