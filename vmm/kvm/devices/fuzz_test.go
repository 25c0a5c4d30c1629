package devices

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Fuzz layout: 32 KiB of RAM, the ring at PFN 1 unless the input moves it:
// descriptors at 0x1000, avail ring at 0x2000, used ring at 0x3000, buffers
// from 0x4000.
const (
	fuzzRAMSize  = 32 << 10
	fuzzDiskSize = 8<<10 + 100 // not a whole number of sectors
	fuzzBufs     = 0x4000
)

// fuzzSeed lays out requests with the test ring builder and returns the
// descriptor table, avail ring and buffer area.
func fuzzSeed(t testing.TB, build func(q *vq)) (desc, avail, bufs []byte) {
	ram := RAM(make([]byte, fuzzRAMSize))
	q := newVQ(t, ram, 1)
	build(q)
	a := q.base + descTableSize
	return ram[q.base:a], ram[a : a+availRingSize], ram[fuzzBufs:q.heap]
}

func FuzzBlockQueue(f *testing.F) {
	seeds := []func(q *vq){
		func(q *vq) {
			w := q.request(blkTOut, 2, pattern(1024, 5), 0)
			r := q.request(blkTIn, 2, nil, 1024)
			fl := q.request(blkTFlush, 0, nil, 0)
			id := q.request(blkTGetID, 0, nil, BlockSerialLen)
			q.publish(w.head, r.head, fl.head, id.head)
		},
		func(q *vq) {
			r := q.request(blkTIn, 15, nil, 1024) // past the end
			q.publish(r.head)
		},
		func(q *vq) {
			r := q.request(blkTIn, 0, nil, 512)
			q.setDesc(r.head+2, r.status, 1, descFWrite|descFNext, r.head)
			q.publish(r.head)
		},
		func(q *vq) {},
	}
	for _, s := range seeds {
		desc, avail, bufs := fuzzSeed(f, s)
		f.Add(uint32(1), desc, avail, bufs, uint8(1))
	}
	f.Fuzz(func(t *testing.T, pfn uint32, desc, avail, bufs []byte, kicks uint8) {
		ram, check := guardedRAM(fuzzRAMSize)
		copy(ram[0x1000:0x2000], desc)
		copy(ram[0x2000:0x3000], avail)
		copy(ram[fuzzBufs:], bufs)
		disk := newMemBackend(t, fuzzDiskSize)
		irq := &fakeIRQ{}
		blk, err := NewBlock(disk, "fuzz", ram, irq, 10)
		if err != nil {
			t.Fatal(err)
		}
		p := bar{t, blk}
		p.write(vioStatus, 1, StatusAcknowledge|StatusDriver)
		p.write(vioGuestFeatures, 4, BlockFeatures)
		p.write(vioQueuePFN, 4, pfn)
		p.write(vioStatus, 1, StatusAcknowledge|StatusDriver|StatusDriverOK)
		for i := range int(kicks%4) + 1 {
			before := blk.State()
			p.notify()
			after := blk.State()
			if before.Status&StatusNeedsReset != 0 && after.UsedIdx != before.UsedIdx {
				t.Fatalf("a device needing reset completed requests")
			}
			if n := after.UsedIdx - before.UsedIdx; n > BlockQueueSize || after.LastAvailIdx-before.LastAvailIdx != n {
				t.Fatalf("kick %d: used idx %d -> %d, last avail %d -> %d", i, before.UsedIdx, after.UsedIdx, before.LastAvailIdx, after.LastAvailIdx)
			}
			if kicks&0x80 != 0 {
				p.read(vioISR, 1)
			}
		}
		check(t)
		if got, want := irq.level(), blk.State().ISR != 0; got != want {
			t.Fatalf("IRQ level %v with ISR %#x", got, blk.State().ISR)
		}
		irq.checkTransitions(t)
		st := blk.State()
		if err := blk.SetState(st); err != nil {
			t.Fatalf("SetState(State()): %v", err)
		}
		if diff := cmp.Diff(st, blk.State()); diff != "" {
			t.Fatalf("state round trip (-want +got):\n%s", diff)
		}
	})
}

// FuzzUART runs random register accesses and host feeds, two bytes per
// operation: op (kind in the top 3 bits, register in the low 3) and value.
func FuzzUART(f *testing.F) {
	f.Add([]byte{0x20 | 3, 0x80, 0x00, 0x01, 0x20 | 3, 0x03, 0x20 | 2, 0xc7, 0x20 | 1, 0x0f, 0xc0, 3, 0x60 | 2, 0, 0x60 | 5, 0, 0x60, 0})
	f.Add([]byte{0x20 | 4, 0x1a, 0x60 | 6, 0, 0x20 | 4, 0x08, 0x00, 'x', 0xe0, 0})
	f.Add([]byte{0x20 | 2, 0x01, 0x20 | 4, 0x10, 0x20 | 1, 0x04, 0x00, 1, 0x00, 2, 0x00, 3, 0x60 | 2, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 4096 {
			ops = ops[:4096] // State() per op copies the queue: keep it quick
		}
		var out bytes.Buffer
		irq := &fakeIRQ{}
		u := NewUART(COM2Port, irq, &out)
		var wantOut []byte
		for i := 0; i+1 < len(ops); i += 2 {
			op, v := ops[i], ops[i+1]
			reg := uint16(op & 7)
			before := u.State()
			switch op >> 5 {
			case 0, 1, 2:
				if reg == uartRBR && before.LCR&lcrDLAB == 0 && before.MCR&mcrLoop == 0 {
					wantOut = append(wantOut, v)
				}
				if err := u.Out(COM2Port+reg, []byte{v}); err != nil {
					t.Fatal(err)
				}
			case 3, 4, 5:
				var d [1]byte
				if err := u.In(COM2Port+reg, d[:]); err != nil {
					t.Fatal(err)
				}
			case 6:
				if err := u.Feed(bytes.Repeat([]byte{v}, int(op&7))); err != nil {
					t.Fatal(err)
				}
			case 7:
				u2 := NewUART(COM2Port, nil, nil)
				if err := u2.SetState(before); err != nil {
					t.Fatalf("SetState(State()): %v", err)
				}
				if diff := cmp.Diff(before, u2.State()); diff != "" {
					t.Fatalf("state round trip (-want +got):\n%s", diff)
				}
			}
			s := u.State()
			if s.IER&^ierMask != 0 || s.MCR&^mcrMask != 0 {
				t.Fatalf("reserved bits: IER %#x MCR %#x", s.IER, s.MCR)
			}
			// An independent statement of the interrupt logic.
			pending := s.IER&ierRLSI != 0 && s.LSR&lsrErrors != 0 ||
				s.IER&ierRDI != 0 && len(s.RX) > 0 ||
				s.IER&ierTHRI != 0 && s.THREPending ||
				s.IER&ierMSI != 0 && s.MSR&msrDelta != 0
			want := pending && s.MCR&mcrOUT2 != 0 && s.MCR&mcrLoop == 0
			if got := irq.level(); got != want {
				t.Fatalf("op %d (%#x %#x): IRQ %v, want %v (state %+v)", i/2, op, v, got, want, s)
			}
		}
		irq.checkTransitions(t)
		if !bytes.Equal(out.Bytes(), wantOut) {
			t.Fatalf("out = %q, want %q", out.Bytes(), wantOut)
		}
		if st := u.Stats(); st.TXBytes != uint64(len(wantOut)) || st.Dropped != 0 {
			t.Fatalf("stats %+v, want %d TX bytes", st, len(wantOut))
		}
	})
}

// TestFuzzSeedsValid checks that the first FuzzBlockQueue seed is a working
// queue, so the fuzzer starts from real requests.
func TestFuzzSeedsValid(t *testing.T) {
	t.Parallel()
	desc, avail, bufs := fuzzSeed(t, func(q *vq) {
		r := q.request(blkTGetID, 0, nil, BlockSerialLen)
		q.publish(r.head)
	})
	ram := RAM(make([]byte, fuzzRAMSize))
	copy(ram[0x1000:], desc)
	copy(ram[0x2000:], avail)
	copy(ram[fuzzBufs:], bufs)
	blk, err := NewBlock(newMemBackend(t, fuzzDiskSize), "fuzz", ram, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	p := bar{t, blk}
	linuxInit(t, p, 1)
	p.notify()
	if got := binary.LittleEndian.Uint16(ram[0x3002:]); got != 1 {
		t.Fatalf("seed request not completed: used idx %d", got)
	}
}

// Console fuzz layout: 64 KiB of RAM, the four rings at PFNs 1, 3, 5, 7
// (0x1000-0x8fff), buffers from 0x9000.
const (
	fuzzConRAM  = 64 << 10
	fuzzConBufs = 0x9000
	fuzzConHeap = 0x1c00 // per queue
)

// consoleSeeds drives real conversations and returns their rings and
// buffers: a fresh device probed over them replays every chain.
func consoleSeeds(t testing.TB) [][2][]byte {
	var out [][2][]byte
	for _, drive := range []func(e *consoleEnv){
		func(e *consoleEnv) {
			e.handshake(4)
			if err := e.con.Feed([]byte("request")); err != nil {
				t.Fatal(err)
			}
			e.isr()
			e.transmit([]byte("resp"), []byte("onse"))
			e.sendControl(0, ctrlPortOpen, 0)
		},
		func(e *consoleEnv) { e.postRX(consoleRXQ, 3, 64); e.transmit(bytes.Repeat([]byte{1}, 300)) },
		func(e *consoleEnv) {},
	} {
		e := newConsoleDeviceIn(t, fuzzConRAM, fuzzConBufs, fuzzConHeap)
		e.probe(consoleFMultiport)
		drive(e)
		out = append(out, [2][]byte{
			append([]byte(nil), e.ram[0x1000:fuzzConBufs]...),
			append([]byte(nil), e.ram[fuzzConBufs:]...),
		})
	}
	return out
}

// FuzzConsole runs a console over guest-written rings and buffers with a
// sequence of operations, one byte each (kind in the high nibble): kick a
// queue, read the ISR, feed host bytes, write the status, bump a queue's
// avail idx, change the guest features, round-trip the state.
func FuzzConsole(f *testing.F) {
	ops := []byte{0x30, 0x12, 0x02, 0x03, 0x10, 0x20, 0x00, 0x10, 0x01, 0x50, 0x13, 0x03}
	for _, s := range consoleSeeds(f) {
		f.Add(s[0], s[1], ops)
	}
	f.Fuzz(func(t *testing.T, rings, bufs, ops []byte) {
		if len(ops) > 256 {
			ops = ops[:256]
		}
		ram, check := guardedRAM(fuzzConRAM)
		copy(ram[0x1000:fuzzConBufs], rings)
		copy(ram[fuzzConBufs:], bufs)
		irq, out := &fakeIRQ{}, &recWriter{}
		con, err := NewConsole(conName, ram, irq, 12, out)
		if err != nil {
			t.Fatal(err)
		}
		p := bar{t, con}
		p.write(vioStatus, 1, StatusAcknowledge|StatusDriver)
		p.write(vioGuestFeatures, 4, ConsoleFeatures)
		for q := range consoleQueues {
			p.write(vioQueueSel, 2, uint32(q))
			p.write(vioQueuePFN, 4, 1+2*uint32(q))
		}
		var fed uint64
		for _, op := range ops {
			fed += fuzzConsoleOp(t, con, p, ram, op)
			checkConsole(t, con, irq, out, fed)
		}
		check(t)
		irq.checkTransitions(t)
	})
}

// fuzzConsoleOp runs one operation and returns the host bytes it fed.
func fuzzConsoleOp(t *testing.T, con *Console, p bar, ram RAM, op byte) uint64 {
	arg := op & 0xf
	switch op >> 4 {
	case 0:
		p.kick(int(arg % consoleQueues))
	case 1:
		p.read(vioISR, 1)
	case 2:
		n := (int(arg) + 1) * 37
		if err := con.Feed(bytes.Repeat([]byte{op}, n)); err != nil {
			t.Fatal(err)
		}
		return uint64(n)
	case 3:
		p.write(vioStatus, 1, []uint32{0, StatusAcknowledge | StatusDriver | StatusDriverOK, StatusFailed}[arg%3])
	case 4:
		a := uint64(1+2*(arg%consoleQueues))<<12 + layoutOf(ConsoleQueueSize).descBytes + 2
		binary.LittleEndian.PutUint16(ram[a:], binary.LittleEndian.Uint16(ram[a:])+1+uint16(arg/4))
	case 5:
		st := con.State()
		c2, err := NewConsole(conName, ram, nil, 12, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c2.SetState(st); err != nil {
			t.Fatalf("SetState(State()): %v", err)
		}
		if diff := cmp.Diff(st, c2.State()); diff != "" {
			t.Fatalf("state round trip (-want +got):\n%s", diff)
		}
	case 6:
		p.write(vioGuestFeatures, 4, uint32(arg))
	default:
		p.read(uint16(arg)&^1, 2)
	}
	return 0
}

// checkConsole checks what must hold after every operation: the line
// follows the ISR, every chain consumed is completed, and every host byte
// is delivered, waiting or discarded, every guest byte sent or dropped.
func checkConsole(t *testing.T, con *Console, irq *fakeIRQ, out *recWriter, fed uint64) {
	st, stats := con.State(), con.Stats()
	if got := irq.level(); got != (st.ISR != 0) {
		t.Fatalf("IRQ level %v with ISR %#x", got, st.ISR)
	}
	for i, q := range st.Queues {
		if q.UsedIdx != q.LastAvailIdx {
			t.Fatalf("queue %d: used idx %d, last avail %d", i, q.UsedIdx, q.LastAvailIdx)
		}
	}
	if got := stats.RXBytes + uint64(len(st.RX)) + stats.RXDiscarded; got != fed {
		t.Fatalf("host bytes: %d delivered + %d waiting + %d discarded, %d fed", stats.RXBytes, len(st.RX), stats.RXDiscarded, fed)
	}
	if got := uint64(len(out.bytes())); got != stats.TXBytes {
		t.Fatalf("out has %d bytes, TXBytes %d", got, stats.TXBytes)
	}
	if len(st.Control) > ConsoleControlLimit {
		t.Fatalf("%d control messages waiting", len(st.Control))
	}
}

// TestConsoleFuzzSeedsValid: the first seed is a working conversation: a
// fresh device replaying it hands out data and reaches the open port.
func TestConsoleFuzzSeedsValid(t *testing.T) {
	t.Parallel()
	s := consoleSeeds(t)[0]
	ram := RAM(make([]byte, fuzzConRAM))
	copy(ram[0x1000:], s[0])
	copy(ram[fuzzConBufs:], s[1])
	out := &recWriter{}
	con, err := NewConsole(conName, ram, nil, 12, out)
	if err != nil {
		t.Fatal(err)
	}
	p := bar{t, con}
	p.write(vioGuestFeatures, 4, ConsoleFeatures)
	for q := range consoleQueues {
		p.write(vioQueueSel, 2, uint32(q))
		p.write(vioQueuePFN, 4, 1+2*uint32(q))
	}
	p.write(vioStatus, 1, StatusAcknowledge|StatusDriver|StatusDriverOK)
	for _, q := range []int{consoleCtrlTXQ, consoleTXQ} {
		p.kick(q)
	}
	if st := con.State(); !st.DeviceReady || !st.PortReady || st.GuestOpen || st.Status&StatusNeedsReset != 0 {
		t.Errorf("replayed state %+v", st)
	}
	if got := string(out.bytes()); got != "response" {
		t.Errorf("replayed transmit %q", got)
	}
}
