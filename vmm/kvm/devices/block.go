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

// Feature bits (mirrors include/uapi/linux/virtio_blk.h).
const (
	blkFSegMax  = 1 << 2
	blkFBlkSize = 1 << 6
	blkFFlush   = 1 << 9
	// BlockFeatures is what a Block offers: SEG_MAX, BLK_SIZE, FLUSH.
	BlockFeatures = blkFSegMax | blkFBlkSize | blkFFlush
)

// The block queue's layout (layoutOf(BlockQueueSize), as constants).
const (
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
	irqLine  uint8
	serial   [BlockSerialLen]byte
	capacity uint64 // in sectors

	mu     sync.Mutex
	vio    virtioPCI
	stats  BlockStats
	rd, wr []segment // scratch for one chain
}

var (
	_ PCIDevice    = (*Block)(nil)
	_ virtioDevice = (*Block)(nil)
)

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
		irqLine:  irqLine,
		capacity: uint64(size) / BlockSectorSize,
		vio:      newVirtioPCI("block", BlockFeatures, BlockIOSize, irq, BlockQueueSize),
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
	q := b.vio.queues[0]
	return BlockState{
		HostFeatures:  BlockFeatures,
		GuestFeatures: b.vio.guestFeatures,
		QueuePFN:      q.pfn,
		QueueSize:     q.size,
		QueueSelect:   b.vio.queueSel,
		Status:        b.vio.status,
		ISR:           b.vio.isr,
		LastAvailIdx:  q.lastAvail,
		UsedIdx:       q.usedIdx,
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
	v := &b.vio
	v.guestFeatures, v.queueSel, v.status, v.isr = s.GuestFeatures, s.QueueSelect, s.Status, s.ISR
	v.queues[0] = virtqueue{size: BlockQueueSize, pfn: s.QueuePFN, lastAvail: s.LastAvailIdx, usedIdx: s.UsedIdx}
	return v.forceIRQ()
}

// ReadBAR implements PCIDevice. Reading the ISR clears it and lowers the
// interrupt.
func (b *Block) ReadBAR(off uint16, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.vio.read(b, off, data)
}

// config implements virtioDevice: struct virtio_blk_config (the part that
// fits in BAR0).
func (b *Block) config(c []byte) {
	binary.LittleEndian.PutUint64(c[0:], b.capacity)
	// size_max (8) is 0: VIRTIO_BLK_F_SIZE_MAX is not offered.
	binary.LittleEndian.PutUint32(c[12:], BlockSegMax)
	// geometry (16) is 0: VIRTIO_BLK_F_GEOMETRY is not offered.
	binary.LittleEndian.PutUint32(c[20:], BlockSectorSize) // blk_size
}

// WriteBAR implements PCIDevice. A write that covers part of a register
// changes those bytes of it; writes to read-only registers are ignored.
func (b *Block) WriteBAR(off uint16, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.vio.write(b, off, data)
}

// notify implements virtioDevice.
func (b *Block) notify(int) { b.process() }

// driverOK implements virtioDevice: the driver may have kicked early.
func (b *Block) driverOK() { b.process() }

// reset implements virtioDevice: nothing beyond the transport (counters stay).
func (b *Block) reset() {}

// fail stops the device (virtioPCI.fail) and counts it.
func (b *Block) fail() {
	b.vio.fail()
	b.stats.Errors++
}

// process completes every request the driver has made available, in order.
// It reads the available index once: requests the guest adds later wait for
// the next notify.
func (b *Block) process() {
	if !b.vio.usable(0) {
		return
	}
	r, err := b.vio.queues[0].ring(b.mem)
	if err != nil {
		b.fail()
		return
	}
	pending, ok := r.pending()
	if !ok {
		b.fail() // more than the ring holds: the index is garbage
		return
	}
	done := 0
	for ; pending > 0; pending-- {
		head, ok := r.head()
		if !ok {
			b.fail()
			break
		}
		n, ok := b.serve(r, head)
		if !ok {
			b.fail()
			break
		}
		r.complete(head, n)
		b.stats.Requests++
		done++
	}
	if done > 0 && r.interruptible() {
		b.vio.isr |= isrQueue
	}
}

// serve runs the request whose chain starts at head and returns the used
// length (bytes written to the chain), or false if it cannot be completed:
// the chain is broken or has no writable status byte in RAM.
func (b *Block) serve(r vring, head uint16) (uint32, bool) {
	var err error
	if b.rd, b.wr, err = walkChain(b.mem, r, head, b.rd, b.wr); err != nil {
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
	if !allOK(b.rd) || !allOK(b.wr) {
		return blkSIOErr, 0
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
