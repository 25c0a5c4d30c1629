package devices

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	testPFN     = 1
	testRAMSize = 64 << 10
	testDisk    = 64 << 10
)

// vq builds a legacy split ring in guest RAM the way Linux's virtio_ring
// does: descriptor table at PFN*4096, avail ring after it, used ring at the
// next 4 KiB boundary.
type vq struct {
	t     testing.TB
	ram   RAM
	base  uint64
	size  uint16
	l     vringLayout
	next  uint16 // next free descriptor
	avail uint16 // driver's avail idx
	heap  uint64 // next free buffer address
}

// newVQ zeroes the ring's memory, as Linux's vring allocation does (a
// block queue: BlockQueueSize entries).
func newVQ(t testing.TB, ram RAM, pfn uint32) *vq { return newVQSize(t, ram, pfn, BlockQueueSize) }

// newVQSize is newVQ for a queue of size entries.
func newVQSize(t testing.TB, ram RAM, pfn uint32, size uint16) *vq {
	q := attachVQSize(t, ram, pfn, size)
	clear(ram[q.base : q.base+q.l.usedOff+q.l.usedBytes])
	return q
}

// attachVQ returns a vq for a block ring already in RAM, with no
// descriptor or avail entry used.
func attachVQ(t testing.TB, ram RAM, pfn uint32) *vq {
	return attachVQSize(t, ram, pfn, BlockQueueSize)
}

func attachVQSize(t testing.TB, ram RAM, pfn uint32, size uint16) *vq {
	base := uint64(pfn) << 12
	l := layoutOf(size)
	return &vq{t: t, ram: ram, base: base, size: size, l: l, heap: base + l.usedOff + 0x1000}
}

func (q *vq) alloc(n int) uint64 {
	a := q.heap
	q.heap += uint64(n+15) &^ 15
	if q.heap > uint64(len(q.ram)) {
		q.t.Fatalf("test RAM exhausted")
	}
	return a
}

func (q *vq) setDesc(i uint16, addr uint64, n uint32, flags, next uint16) {
	d := q.ram[q.base+descSize*uint64(i):]
	binary.LittleEndian.PutUint64(d[0:], addr)
	binary.LittleEndian.PutUint32(d[8:], n)
	binary.LittleEndian.PutUint16(d[12:], flags)
	binary.LittleEndian.PutUint16(d[14:], next)
}

type vbuf struct {
	addr  uint64
	n     uint32
	write bool
}

// chain writes bufs into consecutive free descriptors, linked, and returns
// the head.
func (q *vq) chain(bufs ...vbuf) uint16 {
	head := q.next
	for i, b := range bufs {
		idx := (head + uint16(i)) % q.size
		var flags uint16
		if b.write {
			flags |= descFWrite
		}
		nxt := (idx + 1) % q.size
		if i < len(bufs)-1 {
			flags |= descFNext
		} else {
			nxt = 0
		}
		q.setDesc(idx, b.addr, b.n, flags, nxt)
	}
	q.next = (head + uint16(len(bufs))) % q.size
	return head
}

func (q *vq) publish(heads ...uint16) {
	a := q.base + q.l.descBytes
	for _, h := range heads {
		binary.LittleEndian.PutUint16(q.ram[a+4+2*uint64(q.avail%q.size):], h)
		q.avail++
	}
	binary.LittleEndian.PutUint16(q.ram[a+2:], q.avail)
}

func (q *vq) setAvailFlags(f uint16) {
	binary.LittleEndian.PutUint16(q.ram[q.base+q.l.descBytes:], f)
}

func (q *vq) usedIdx() uint16 {
	return binary.LittleEndian.Uint16(q.ram[q.base+q.l.usedOff+2:])
}

func (q *vq) usedFlags() uint16 {
	return binary.LittleEndian.Uint16(q.ram[q.base+q.l.usedOff:])
}

func (q *vq) used(i uint16) (id, n uint32) {
	e := q.ram[q.base+q.l.usedOff+4+8*uint64(i%q.size):]
	return binary.LittleEndian.Uint32(e), binary.LittleEndian.Uint32(e[4:])
}

// req is one virtio-blk request laid out as Linux's virtblk does: header,
// data, status, each its own descriptor.
type req struct {
	head              uint16
	hdr, data, status uint64
	dataLen           int
}

func (q *vq) request(typ uint32, sector uint64, out []byte, in int) req {
	r := req{hdr: q.alloc(blkReqHeaderSize)}
	binary.LittleEndian.PutUint32(q.ram[r.hdr:], typ)
	binary.LittleEndian.PutUint64(q.ram[r.hdr+8:], sector)
	bufs := []vbuf{{r.hdr, blkReqHeaderSize, false}}
	switch {
	case out != nil:
		r.data, r.dataLen = q.alloc(len(out)), len(out)
		copy(q.ram[r.data:], out)
		bufs = append(bufs, vbuf{r.data, uint32(len(out)), false})
	case in > 0:
		r.data, r.dataLen = q.alloc(in), in
		bufs = append(bufs, vbuf{r.data, uint32(in), true})
	}
	r.status = q.alloc(1)
	q.ram[r.status] = 0xff
	bufs = append(bufs, vbuf{r.status, 1, true})
	r.head = q.chain(bufs...)
	return r
}

func (q *vq) statusOf(r req) uint8 { return q.ram[r.status] }
func (q *vq) dataOf(r req) []byte  { return q.ram[r.data : r.data+uint64(r.dataLen)] }

// bar reads and writes a virtio device's registers.
type bar struct {
	t testing.TB
	b PCIDevice
}

func (p bar) read(off uint16, n int) uint32 {
	p.t.Helper()
	data := make([]byte, n)
	if err := p.b.ReadBAR(off, data); err != nil {
		p.t.Fatalf("read BAR %#x: %v", off, err)
	}
	var buf [4]byte
	copy(buf[:], data)
	return binary.LittleEndian.Uint32(buf[:])
}

func (p bar) write(off uint16, n int, v uint32) {
	p.t.Helper()
	var buf [4]byte
	binary.LittleEndian.PutUint32(buf[:], v)
	if err := p.b.WriteBAR(off, buf[:n]); err != nil {
		p.t.Fatalf("write BAR %#x: %v", off, err)
	}
}

func (p bar) notify() { p.t.Helper(); p.write(vioQueueNotify, 2, 0) }

// kick notifies queue q.
func (p bar) kick(q int) { p.t.Helper(); p.write(vioQueueNotify, 2, uint32(q)) }

// linuxInit replays virtio_pci_legacy's probe and virtblk's setup.
func linuxInit(t testing.TB, p bar, pfn uint32) {
	t.Helper()
	p.write(vioStatus, 1, 0)
	if got := p.read(vioStatus, 1); got != 0 {
		t.Fatalf("status after reset = %#x", got)
	}
	p.write(vioStatus, 1, StatusAcknowledge)
	p.write(vioStatus, 1, StatusAcknowledge|StatusDriver)
	host := p.read(vioHostFeatures, 4)
	if host != BlockFeatures {
		t.Fatalf("host features %#x, want %#x", host, BlockFeatures)
	}
	p.write(vioGuestFeatures, 4, host|1<<28) // an unoffered bit is dropped
	if got := p.read(vioGuestFeatures, 4); got != host {
		t.Fatalf("guest features read back %#x, want %#x", got, host)
	}
	p.write(vioQueueSel, 2, 0)
	if n := p.read(vioQueueNum, 2); n != BlockQueueSize {
		t.Fatalf("queue size %d", n)
	}
	if got := p.read(vioQueuePFN, 4); got != 0 {
		t.Fatalf("queue PFN %#x before setup", got)
	}
	p.write(vioQueuePFN, 4, pfn)
	p.write(vioStatus, 1, StatusAcknowledge|StatusDriver|StatusDriverOK)
}

type blockEnv struct {
	blk     *Block
	p       bar
	q       *vq
	disk    *memBackend
	irq     *fakeIRQ
	ram     RAM
	checkRA func(testing.TB)
}

func newBlockEnv(t testing.TB) *blockEnv {
	t.Helper()
	ram, check := guardedRAM(testRAMSize)
	disk := newMemBackend(t, testDisk)
	irq := &fakeIRQ{}
	blk, err := NewBlock(disk, "themis-disk-0", ram, irq, 11)
	if err != nil {
		t.Fatal(err)
	}
	e := &blockEnv{blk: blk, p: bar{t, blk}, q: newVQ(t, ram, testPFN), disk: disk, irq: irq, ram: ram, checkRA: check}
	linuxInit(t, e.p, testPFN)
	return e
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

func TestBlockConfigSpace(t *testing.T) {
	t.Parallel()
	e := newBlockEnv(t)
	// virtio_cread bytes one at a time, as vp_get does.
	var cfg [24]byte
	for i := range cfg {
		cfg[i] = byte(e.p.read(vioConfig+uint16(i), 1))
	}
	if got, want := binary.LittleEndian.Uint64(cfg[0:]), uint64(testDisk/512); got != want {
		t.Errorf("capacity = %d sectors, want %d", got, want)
	}
	if got := binary.LittleEndian.Uint32(cfg[12:]); got != BlockSegMax {
		t.Errorf("seg_max = %d, want %d", got, BlockSegMax)
	}
	if got := binary.LittleEndian.Uint32(cfg[20:]); got != BlockSectorSize {
		t.Errorf("blk_size = %d, want %d", got, BlockSectorSize)
	}
	if got := e.p.read(vioQueueSel, 2); got != 0 {
		t.Errorf("queue select = %d", got)
	}
	e.p.write(vioQueueSel, 2, 1)
	if got := e.p.read(vioQueueNum, 2); got != 0 {
		t.Errorf("queue 1 size = %d, want 0 (no such queue)", got)
	}
	e.p.write(vioQueuePFN, 4, 7) // ignored for a queue that does not exist
	e.p.write(vioQueueSel, 2, 0)
	if got := e.p.read(vioQueuePFN, 4); got != testPFN {
		t.Errorf("queue 0 PFN = %d, want %d", got, testPFN)
	}
	e.p.write(vioConfig, 4, 0) // config is read-only
	if got := e.p.read(vioConfig, 4); got != testDisk/512 {
		t.Errorf("capacity after a write = %d", got)
	}
	for _, a := range []struct {
		off uint16
		n   int
	}{{0x40, 1}, {0x3e, 4}, {0, 3}, {0, 8}} {
		if err := e.blk.ReadBAR(a.off, make([]byte, a.n)); !errors.Is(err, ErrBadAccess) {
			t.Errorf("read %d at %#x: %v, want ErrBadAccess", a.n, a.off, err)
		}
	}
}

func TestBlockRequests(t *testing.T) {
	t.Parallel()
	serial := []byte("themis-disk-0\x00\x00\x00\x00\x00\x00\x00")
	tests := []struct {
		name       string
		typ        uint32
		sector     uint64
		out        []byte
		in         int
		flushErr   error
		readErr    error
		wantStatus uint8
		wantUsed   uint32
		wantData   []byte // IN: what lands in the buffer
		wantDisk   func(d []byte) bool
		wantStats  BlockStats
		wantFlush  int
	}{
		{name: "write", typ: blkTOut, sector: 3, out: pattern(1024, 1), wantStatus: blkSOK, wantUsed: 1,
			wantDisk:  func(d []byte) bool { return bytes.Equal(d[3*512:5*512], pattern(1024, 1)) },
			wantStats: BlockStats{Requests: 1, BytesWritten: 1024}},
		{name: "read", typ: blkTIn, sector: 1, in: 512, wantStatus: blkSOK, wantUsed: 513,
			wantData: pattern(512, 9), wantStats: BlockStats{Requests: 1, BytesRead: 512}},
		{name: "read last sector", typ: blkTIn, sector: testDisk/512 - 1, in: 512, wantStatus: blkSOK, wantUsed: 513,
			wantData: make([]byte, 512), wantStats: BlockStats{Requests: 1, BytesRead: 512}},
		{name: "read past the end", typ: blkTIn, sector: testDisk/512 - 1, in: 1024, wantStatus: blkSIOErr, wantUsed: 1,
			wantData: make([]byte, 1024), wantStats: BlockStats{Requests: 1, Errors: 1}},
		{name: "write past the end", typ: blkTOut, sector: testDisk / 512, out: pattern(512, 1), wantStatus: blkSIOErr, wantUsed: 1,
			wantStats: BlockStats{Requests: 1, Errors: 1}},
		{name: "sector overflow", typ: blkTOut, sector: 1 << 63, out: pattern(512, 1), wantStatus: blkSIOErr, wantUsed: 1,
			wantStats: BlockStats{Requests: 1, Errors: 1}},
		{name: "partial sector", typ: blkTIn, sector: 0, in: 100, wantStatus: blkSIOErr, wantUsed: 1,
			wantData: make([]byte, 100), wantStats: BlockStats{Requests: 1, Errors: 1}},
		{name: "backend read error", typ: blkTIn, sector: 0, in: 512, readErr: errors.New("EIO"), wantStatus: blkSIOErr, wantUsed: 1,
			wantData: make([]byte, 512), wantStats: BlockStats{Requests: 1, Errors: 1}},
		{name: "flush", typ: blkTFlush, wantStatus: blkSOK, wantUsed: 1, wantFlush: 1,
			wantStats: BlockStats{Requests: 1}},
		{name: "flush fails", typ: blkTFlush, flushErr: errors.New("EIO"), wantStatus: blkSIOErr, wantUsed: 1, wantFlush: 1,
			wantStats: BlockStats{Requests: 1, Errors: 1}},
		{name: "get id", typ: blkTGetID, in: BlockSerialLen, wantStatus: blkSOK, wantUsed: BlockSerialLen + 1,
			wantData: serial, wantStats: BlockStats{Requests: 1}},
		{name: "get id, short buffer", typ: blkTGetID, in: 6, wantStatus: blkSOK, wantUsed: 7,
			wantData: serial[:6], wantStats: BlockStats{Requests: 1}},
		{name: "unknown type", typ: 2 /* SCSI_CMD */, wantStatus: blkSUnsupp, wantUsed: 1,
			wantStats: BlockStats{Requests: 1, Errors: 1}},
		{name: "discard not offered", typ: 11, out: make([]byte, 16), wantStatus: blkSUnsupp, wantUsed: 1,
			wantStats: BlockStats{Requests: 1, Errors: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newBlockEnv(t)
			copy(e.disk.data[512:], pattern(512, 9))
			e.disk.flushErr, e.disk.readErr = tt.flushErr, tt.readErr
			r := e.q.request(tt.typ, tt.sector, tt.out, tt.in)
			e.q.publish(r.head)
			e.p.notify()
			if got := e.q.statusOf(r); got != tt.wantStatus {
				t.Errorf("status = %d, want %d", got, tt.wantStatus)
			}
			if got := e.q.usedIdx(); got != 1 {
				t.Fatalf("used idx = %d, want 1", got)
			}
			if id, n := e.q.used(0); id != uint32(r.head) || n != tt.wantUsed {
				t.Errorf("used elem = {%d, %d}, want {%d, %d}", id, n, r.head, tt.wantUsed)
			}
			if tt.wantData != nil {
				if diff := cmp.Diff(tt.wantData, e.q.dataOf(r)); diff != "" {
					t.Errorf("data (-want +got):\n%s", diff)
				}
			}
			if tt.wantDisk != nil && !tt.wantDisk(e.disk.snapshot()) {
				t.Errorf("disk contents wrong")
			}
			if diff := cmp.Diff(tt.wantStats, e.blk.Stats()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
			if e.disk.flushes != tt.wantFlush {
				t.Errorf("%d flushes, want %d", e.disk.flushes, tt.wantFlush)
			}
			if !e.irq.level() {
				t.Errorf("IRQ not raised")
			}
			if got := e.p.read(vioISR, 1); got != isrQueue {
				t.Errorf("ISR = %#x, want %#x", got, isrQueue)
			}
			if e.irq.level() {
				t.Errorf("IRQ still high after ISR read")
			}
			if got := e.p.read(vioISR, 1); got != 0 {
				t.Errorf("second ISR read = %#x, want 0", got)
			}
			if got := e.p.read(vioStatus, 1); got&StatusNeedsReset != 0 {
				t.Errorf("NEEDS_RESET set")
			}
			e.irq.checkTransitions(t)
			e.checkRA(t)
		})
	}
}

func TestBlockWriteReadBack(t *testing.T) {
	t.Parallel()
	e := newBlockEnv(t)
	data := pattern(4096, 3)
	// A write whose data spans three descriptors, and a read in two.
	hdr := e.q.alloc(16)
	binary.LittleEndian.PutUint32(e.ram[hdr:], blkTOut)
	binary.LittleEndian.PutUint64(e.ram[hdr+8:], 10)
	a, b, c := e.q.alloc(512), e.q.alloc(2048), e.q.alloc(1536)
	copy(e.ram[a:], data[:512])
	copy(e.ram[b:], data[512:2560])
	copy(e.ram[c:], data[2560:])
	st := e.q.alloc(1)
	w := e.q.chain(vbuf{hdr, 16, false}, vbuf{a, 512, false}, vbuf{b, 2048, false}, vbuf{c, 1536, false}, vbuf{st, 1, true})
	r := e.q.request(blkTIn, 10, nil, 4096)
	f := e.q.request(blkTFlush, 0, nil, 0)
	e.q.publish(w, r.head, f.head)
	e.p.notify()
	if e.ram[st] != blkSOK || e.q.statusOf(r) != blkSOK || e.q.statusOf(f) != blkSOK {
		t.Fatalf("statuses %d %d %d", e.ram[st], e.q.statusOf(r), e.q.statusOf(f))
	}
	if !bytes.Equal(e.q.dataOf(r), data) {
		t.Errorf("read back differs from what was written")
	}
	if !bytes.Equal(e.disk.snapshot()[10*512:10*512+4096], data) {
		t.Errorf("disk differs from what was written")
	}
	if got := e.q.usedIdx(); got != 3 {
		t.Errorf("used idx %d, want 3", got)
	}
	for i, want := range []uint16{w, r.head, f.head} {
		if id, _ := e.q.used(uint16(i)); id != uint32(want) {
			t.Errorf("used[%d].id = %d, want %d", i, id, want)
		}
	}
	want := BlockStats{Requests: 3, BytesRead: 4096, BytesWritten: 4096}
	if diff := cmp.Diff(want, e.blk.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	// Header, data and status in one writable-last layout (ANY_LAYOUT style):
	// the status is the last byte of the last writable buffer.
	hdr2 := e.q.alloc(16)
	binary.LittleEndian.PutUint32(e.ram[hdr2:], blkTGetID)
	buf := e.q.alloc(21)
	h := e.q.chain(vbuf{hdr2, 16, false}, vbuf{buf, 21, true})
	e.q.publish(h)
	e.p.notify()
	if got := string(e.ram[buf : buf+13]); got != "themis-disk-0" || e.ram[buf+20] != blkSOK {
		t.Errorf("combined GET_ID buffer %q, status %d", e.ram[buf:buf+21], e.ram[buf+20])
	}
}

// malformedCase is one malformed descriptor chain.
type malformedCase struct {
	name  string
	build func(q *vq, ram RAM) (head uint16, status uint64)
	// wantStatus is the request status, or 0xff where the device must
	// instead stop with NEEDS_RESET.
	wantStatus uint8
}

// malformedCases are the chains TestBlockMalformed feeds the device.
func malformedCases() []malformedCase {
	const outside = testRAMSize + 4096
	return []malformedCase{
		{"loop", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTIn, 0, nil, 512)
			q.setDesc(r.head+2, r.status, 1, descFWrite|descFNext, r.head) // status -> head
			return r.head, r.status
		}, 0xff},
		{"self loop", func(q *vq, ram RAM) (uint16, uint64) {
			h := q.chain(vbuf{q.alloc(16), 16, false})
			q.setDesc(h, q.alloc(16), 16, descFNext, h)
			return h, 0
		}, 0xff},
		{"next out of range", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTIn, 0, nil, 512)
			q.setDesc(r.head, r.hdr, 16, descFNext, BlockQueueSize)
			return r.head, r.status
		}, 0xff},
		{"head out of range", func(q *vq, ram RAM) (uint16, uint64) {
			return 0xffff, 0
		}, 0xff},
		{"indirect", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTIn, 0, nil, 512)
			q.setDesc(r.head, r.hdr, 16, descFNext|descFIndirect, r.head+1)
			return r.head, r.status
		}, 0xff},
		{"readable after writable", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTOut, 0, make([]byte, 512), 0)
			q.setDesc(r.head+1, r.data, 512, descFWrite|descFNext, r.head+2)
			q.setDesc(r.head+2, r.status, 1, 0, 0) // status readable, after a writable
			return r.head, r.status
		}, 0xff},
		{"status not writable", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTFlush, 0, nil, 0)
			q.setDesc(r.head+1, r.status, 1, 0, 0)
			return r.head, r.status
		}, 0xff},
		{"status outside RAM", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTIn, 0, nil, 512)
			q.setDesc(r.head+2, outside, 1, descFWrite, 0)
			return r.head, 0
		}, 0xff},
		{"status at the last byte of RAM", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTFlush, 0, nil, 0)
			q.setDesc(r.head+1, testRAMSize-1, 1, descFWrite, 0)
			return r.head, testRAMSize - 1
		}, blkSOK},
		{"data outside RAM", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTIn, 0, nil, 512)
			q.setDesc(r.head+1, testRAMSize-256, 512, descFWrite|descFNext, r.head+2)
			return r.head, r.status
		}, blkSIOErr},
		{"data length wraps the address space", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTOut, 0, make([]byte, 512), 0)
			q.setDesc(r.head+1, ^uint64(0)-100, 0xffffffff, descFNext, r.head+2)
			return r.head, r.status
		}, blkSIOErr},
		{"header outside RAM", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTOut, 0, make([]byte, 512), 0)
			q.setDesc(r.head, outside, 16, descFNext, r.head+1)
			return r.head, r.status
		}, blkSIOErr},
		{"header too short", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTIn, 0, nil, 512)
			q.setDesc(r.head, r.hdr, 8, descFNext, r.head+1)
			return r.head, r.status
		}, blkSIOErr},
		{"no header", func(q *vq, ram RAM) (uint16, uint64) {
			st := q.alloc(1)
			return q.chain(vbuf{st, 1, true}), st
		}, blkSIOErr},
		{"read into readable data", func(q *vq, ram RAM) (uint16, uint64) {
			r := q.request(blkTIn, 0, make([]byte, 512), 0)
			return r.head, r.status
		}, blkSOK}, // zero-length read; the readable data is ignored
		{"chain of the whole queue", func(q *vq, ram RAM) (uint16, uint64) {
			hdr := q.alloc(16)
			binary.LittleEndian.PutUint32(ram[hdr:], blkTFlush)
			bufs := []vbuf{{hdr, 16, false}}
			for range BlockQueueSize - 2 {
				bufs = append(bufs, vbuf{hdr, 0, false})
			}
			st := q.alloc(1)
			bufs = append(bufs, vbuf{st, 1, true})
			return q.chain(bufs...), st
		}, blkSOK},
		{"chain longer than the queue", func(q *vq, ram RAM) (uint16, uint64) {
			hdr := q.alloc(16)
			bufs := []vbuf{{hdr, 16, false}}
			for range BlockQueueSize {
				bufs = append(bufs, vbuf{hdr, 0, false})
			}
			return q.chain(bufs...), 0 // wraps onto itself
		}, 0xff},
	}
}

// checkStoppedAndReset checks a device that met a malformed chain: it
// stopped with NEEDS_RESET (device status st), completes nothing until
// reset, keeps NEEDS_RESET across a status write, and works after a reset.
func checkStoppedAndReset(t *testing.T, e *blockEnv, st uint32) {
	t.Helper()
	if st&StatusNeedsReset == 0 {
		t.Fatalf("device status %#x: NEEDS_RESET not set", st)
	}
	if got := e.q.usedIdx(); got != 0 {
		t.Errorf("used idx %d, want 0", got)
	}
	if got := e.p.read(vioISR, 1); got != isrConfig {
		t.Errorf("ISR = %#x, want config change", got)
	}
	// Stopped: a valid request waits until reset.
	r := e.q.request(blkTFlush, 0, nil, 0)
	e.q.publish(r.head)
	e.p.notify()
	if got := e.q.usedIdx(); got != 0 {
		t.Errorf("a stopped device completed a request")
	}
	// The driver writing status keeps NEEDS_RESET.
	e.p.write(vioStatus, 1, st&^StatusNeedsReset|StatusFailed)
	if got := e.p.read(vioStatus, 1); got&StatusNeedsReset == 0 {
		t.Errorf("NEEDS_RESET cleared by a status write")
	}
	// Reset recovers.
	q := newVQ(t, e.ram, testPFN)
	linuxInit(t, e.p, testPFN)
	r = q.request(blkTFlush, 0, nil, 0)
	q.publish(r.head)
	e.p.notify()
	if q.usedIdx() != 1 || q.statusOf(r) != blkSOK {
		t.Errorf("after reset: used idx %d, status %d", q.usedIdx(), q.statusOf(r))
	}
}

func TestBlockMalformed(t *testing.T) {
	t.Parallel()
	for _, tt := range malformedCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newBlockEnv(t)
			before := e.disk.snapshot()
			head, status := tt.build(e.q, e.ram)
			if status != 0 {
				e.ram[status] = 0xee
			}
			e.q.publish(head)
			e.p.notify()
			e.checkRA(t)
			st := e.p.read(vioStatus, 1)
			if tt.wantStatus == 0xff {
				checkStoppedAndReset(t, e, st)
			} else {
				if st&StatusNeedsReset != 0 {
					t.Fatalf("NEEDS_RESET set for a completable request")
				}
				if got := e.ram[status]; got != tt.wantStatus {
					t.Errorf("request status %d, want %d", got, tt.wantStatus)
				}
				if id, _ := e.q.used(0); e.q.usedIdx() != 1 || id != uint32(head) {
					t.Errorf("used idx %d, id %d", e.q.usedIdx(), id)
				}
			}
			if !bytes.Equal(before, e.disk.snapshot()) {
				t.Errorf("disk changed")
			}
			e.checkRA(t)
		})
	}
}

func TestBlockQueueFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(e *blockEnv)
	}{
		{"ring beyond RAM", func(e *blockEnv) {
			e.p.write(vioStatus, 1, 0)
			e.p.write(vioStatus, 1, StatusAcknowledge|StatusDriver)
			e.p.write(vioQueuePFN, 4, testRAMSize/4096-1)
			e.p.write(vioStatus, 1, StatusAcknowledge|StatusDriver|StatusDriverOK)
		}},
		{"ring at the top of the address space", func(e *blockEnv) {
			e.p.write(vioQueuePFN, 4, 0xffffffff)
		}},
		{"avail idx too far ahead", func(e *blockEnv) {
			binary.LittleEndian.PutUint16(e.ram[e.q.base+descTableSize+2:], BlockQueueSize+1)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newBlockEnv(t)
			r := e.q.request(blkTFlush, 0, nil, 0)
			e.q.publish(r.head)
			tt.setup(e)
			e.p.notify()
			if st := e.p.read(vioStatus, 1); st&StatusNeedsReset == 0 {
				t.Errorf("status %#x: NEEDS_RESET not set", st)
			}
			if !e.irq.level() {
				t.Errorf("no config interrupt")
			}
			e.checkRA(t)
		})
	}
}

func TestBlockInterruptSuppression(t *testing.T) {
	t.Parallel()
	e := newBlockEnv(t)
	e.q.setAvailFlags(availFNoIntr)
	r := e.q.request(blkTFlush, 0, nil, 0)
	e.q.publish(r.head)
	e.p.notify()
	if e.q.usedIdx() != 1 {
		t.Fatal("request not completed")
	}
	if e.irq.level() || e.p.read(vioISR, 1) != 0 {
		t.Errorf("interrupt despite VRING_AVAIL_F_NO_INTERRUPT")
	}
	e.q.setAvailFlags(0)
	r = e.q.request(blkTFlush, 0, nil, 0)
	e.q.publish(r.head)
	e.p.notify()
	if !e.irq.level() {
		t.Errorf("no interrupt")
	}
	// Two completions before the driver reads the ISR: one interrupt.
	r = e.q.request(blkTFlush, 0, nil, 0)
	e.q.publish(r.head)
	e.p.notify()
	if got := e.p.read(vioISR, 1); got != isrQueue {
		t.Errorf("ISR = %#x", got)
	}
	if diff := cmp.Diff([]bool{true, false}, e.irq.history()); diff != "" {
		t.Errorf("IRQ levels (-want +got):\n%s", diff)
	}
}

func TestBlockEarlyKick(t *testing.T) {
	t.Parallel()
	ram, _ := guardedRAM(testRAMSize)
	disk := newMemBackend(t, testDisk)
	blk, err := NewBlock(disk, "early", ram, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	p := bar{t, blk}
	q := newVQ(t, ram, testPFN)
	p.write(vioStatus, 1, StatusAcknowledge|StatusDriver)
	p.write(vioQueuePFN, 4, testPFN)
	r := q.request(blkTFlush, 0, nil, 0)
	q.publish(r.head)
	p.notify()
	if q.usedIdx() != 0 {
		t.Fatalf("request processed before DRIVER_OK")
	}
	p.write(vioStatus, 1, StatusAcknowledge|StatusDriver|StatusDriverOK)
	if q.usedIdx() != 1 || q.statusOf(r) != blkSOK {
		t.Errorf("request kicked before DRIVER_OK not processed at DRIVER_OK")
	}
}

func TestBlockReset(t *testing.T) {
	t.Parallel()
	e := newBlockEnv(t)
	r := e.q.request(blkTFlush, 0, nil, 0)
	e.q.publish(r.head)
	e.p.notify()
	if !e.irq.level() {
		t.Fatal("no interrupt")
	}
	e.p.write(vioStatus, 1, 0)
	want := BlockState{HostFeatures: BlockFeatures, QueueSize: BlockQueueSize, Capacity: testDisk / 512}
	if diff := cmp.Diff(want, e.blk.State()); diff != "" {
		t.Errorf("state after reset (-want +got):\n%s", diff)
	}
	if e.irq.level() {
		t.Errorf("IRQ high after reset")
	}
	// The driver sets the queue up afresh at idx 0.
	q := newVQ(t, e.ram, 2)
	linuxInit(t, e.p, 2)
	r = q.request(blkTGetID, 0, nil, BlockSerialLen)
	q.publish(r.head)
	e.p.notify()
	if q.usedIdx() != 1 || q.statusOf(r) != blkSOK {
		t.Errorf("after reset: used idx %d, status %d", q.usedIdx(), q.statusOf(r))
	}
}

// TestBlockState checkpoints mid-queue, runs on, restores into a fresh
// device (with RAM and disk restored), and checks the same requests replay
// identically.
func TestBlockState(t *testing.T) {
	t.Parallel()
	e := newBlockEnv(t)
	var reqs []req
	for i := range 4 {
		r := e.q.request(blkTOut, uint64(i), pattern(512, byte(i)), 0)
		reqs = append(reqs, r)
	}
	rd := e.q.request(blkTIn, 0, nil, 2048)
	e.q.publish(reqs[0].head, reqs[1].head)
	e.p.notify()
	saved := e.blk.State()
	want := BlockState{HostFeatures: BlockFeatures, GuestFeatures: BlockFeatures, QueuePFN: testPFN,
		QueueSize: BlockQueueSize, Status: StatusAcknowledge | StatusDriver | StatusDriverOK, ISR: isrQueue,
		LastAvailIdx: 2, UsedIdx: 2, Capacity: testDisk / 512}
	if diff := cmp.Diff(want, saved); diff != "" {
		t.Fatalf("State (-want +got):\n%s", diff)
	}
	savedRAM := append([]byte(nil), e.ram...)
	savedDisk := e.disk.snapshot()

	// Run on: two more writes and a read.
	e.q.publish(reqs[2].head, reqs[3].head, rd.head)
	e.p.notify()
	ramAfter := append([]byte(nil), e.ram...)
	diskAfter := e.disk.snapshot()
	stateAfter := e.blk.State()

	// Restore into a fresh device and replay.
	ram2, check := guardedRAM(testRAMSize)
	copy(ram2, savedRAM)
	disk2 := newMemBackend(t, testDisk)
	copy(disk2.data, savedDisk)
	irq2 := &fakeIRQ{}
	blk2, err := NewBlock(disk2, "themis-disk-0", ram2, irq2, 11)
	if err != nil {
		t.Fatal(err)
	}
	if err := blk2.SetState(saved); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true}, irq2.history()); diff != "" {
		t.Errorf("SetState IRQ levels (-want +got):\n%s", diff)
	}
	qr := attachVQ(t, ram2, testPFN)
	qr.avail = 2
	// The driver's avail ring writes, replayed on the restored RAM.
	qr.publish(reqs[2].head, reqs[3].head, rd.head)
	bar{t, blk2}.notify()
	if !bytes.Equal(ramAfter, ram2) {
		t.Errorf("RAM after replay differs")
	}
	if !bytes.Equal(diskAfter, disk2.snapshot()) {
		t.Errorf("disk after replay differs")
	}
	if diff := cmp.Diff(stateAfter, blk2.State()); diff != "" {
		t.Errorf("state after replay (-orig +replay):\n%s", diff)
	}
	check(t)

	bad := map[string]func(*BlockState){
		"features":      func(s *BlockState) { s.HostFeatures = 0 },
		"queue size":    func(s *BlockState) { s.QueueSize = 128 },
		"capacity":      func(s *BlockState) { s.Capacity++ },
		"guest feature": func(s *BlockState) { s.GuestFeatures |= 1 << 28 },
		"ISR":           func(s *BlockState) { s.ISR = 4 },
	}
	for name, f := range bad {
		s := saved
		f(&s)
		if err := blk2.SetState(s); !errors.Is(err, ErrBadState) {
			t.Errorf("%s: %v, want ErrBadState", name, err)
		}
	}
}

func TestNewBlock(t *testing.T) {
	t.Parallel()
	ram := RAM(make([]byte, 4096))
	tests := []struct {
		name    string
		backend Backend
		serial  string
		mem     Memory
		ok      bool
	}{
		{"ok", newMemBackend(t, 4096), "vda", ram, true},
		{"20-byte serial", newMemBackend(t, 4096), "01234567890123456789", ram, true},
		{"empty disk", newMemBackend(t, 0), "", ram, true},
		{"21-byte serial", newMemBackend(t, 4096), "012345678901234567890", ram, false},
		{"NUL in serial", newMemBackend(t, 4096), "a\x00b", ram, false},
		{"nil backend", nil, "x", ram, false},
		{"nil memory", newMemBackend(t, 4096), "x", nil, false},
	}
	for _, tt := range tests {
		_, err := NewBlock(tt.backend, tt.serial, tt.mem, nil, 5)
		if got := err == nil; got != tt.ok || (!tt.ok && !errors.Is(err, ErrBadConfig)) {
			t.Errorf("%s: %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestRAMSlice(t *testing.T) {
	t.Parallel()
	ram := RAM(make([]byte, 100))
	tests := []struct {
		addr, n uint64
		ok      bool
	}{
		{0, 100, true},
		{99, 1, true},
		{100, 0, true},
		{100, 1, false},
		{101, 0, false},
		{50, 51, false},
		{1, ^uint64(0), false},
		{^uint64(0), 2, false},
	}
	for _, tt := range tests {
		b, err := ram.Slice(tt.addr, tt.n)
		if got := err == nil; got != tt.ok || (!tt.ok && !errors.Is(err, ErrOutOfRange)) {
			t.Errorf("Slice(%d, %d): %v, want ok=%v", tt.addr, tt.n, err, tt.ok)
			continue
		}
		if tt.ok && (uint64(len(b)) != tt.n || uint64(cap(b)) != tt.n) {
			t.Errorf("Slice(%d, %d): len %d cap %d", tt.addr, tt.n, len(b), cap(b))
		}
	}
}

func TestBlockThroughBus(t *testing.T) {
	t.Parallel()
	ram, _ := guardedRAM(testRAMSize)
	irq := &fakeIRQ{}
	blk, err := NewBlock(newMemBackend(t, testDisk), "bus", ram, irq, 10)
	if err != nil {
		t.Fatal(err)
	}
	bus := NewPCIBus()
	slot, err := bus.Add(blk)
	if err != nil {
		t.Fatal(err)
	}
	a := confAddr(0, slot, 0, pciBAR0)
	confWrite(t, bus, a, pciBAR0, 4, 0xffffffff)
	if got := confRead(t, bus, a, pciBAR0, 4); got != 0xffffffc1 {
		t.Errorf("BAR0 size mask %#x, want 0xffffffc1 (0x40 bytes of I/O)", got)
	}
	confWrite(t, bus, a, pciBAR0, 4, 0xc040)
	pd, ok := bus.Route(0xc040 + vioQueueNum)
	if !ok {
		t.Fatal("no route")
	}
	d := make([]byte, 2)
	if err := pd.In(0xc040+vioQueueNum, d); err != nil || binary.LittleEndian.Uint16(d) != BlockQueueSize {
		t.Errorf("queue size through the bus: %v, %v", d, err)
	}
}

// TestBlockConcurrentHost reads State and Stats from a host goroutine while
// the "vCPU" runs requests, for the race detector.
func TestBlockConcurrentHost(t *testing.T) {
	t.Parallel()
	e := newBlockEnv(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_ = e.blk.State()
				_ = e.blk.Stats()
			}
		}
	}()
	for i := range 300 {
		r := e.q.request(blkTFlush, 0, nil, 0)
		e.q.publish(r.head)
		e.p.notify()
		if i%50 == 0 {
			e.q.heap = e.q.base + usedRingOffset + 0x1000 // reuse buffers
		}
	}
	close(stop)
	<-done
	if got := e.blk.Stats().Requests; got != 300 {
		t.Errorf("%d requests, want 300", got)
	}
}
