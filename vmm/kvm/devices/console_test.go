package devices

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestNewConsole(t *testing.T) {
	t.Parallel()
	ram := RAM(make([]byte, 4096))
	for _, tt := range []struct {
		name string
		mem  Memory
		ok   bool
	}{
		{conName, ram, true},
		{"org.qemu.guest_agent.0", ram, true},
		{strings.Repeat("x", ConsoleNameMax), ram, true},
		{strings.Repeat("x", ConsoleNameMax+1), ram, false},
		{"", ram, false},
		{"has space", ram, false},
		{"nul\x00", ram, false},
		{"é", ram, false},
		{conName, nil, false},
	} {
		_, err := NewConsole(tt.name, tt.mem, nil, 12, nil)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrBadConfig)) {
			t.Errorf("NewConsole(%q, mem %v) = %v, want ok %v", tt.name, tt.mem != nil, err, tt.ok)
		}
	}
}

// TestConsoleConfigSpace: identity, registers, queue sizes and the config
// as the legacy driver reads them.
func TestConsoleConfigSpace(t *testing.T) {
	t.Parallel()
	e := newConsoleDevice(t)
	c := e.con.PCIConfig()
	if c.VendorID != VirtioVendorID || c.DeviceID != VirtioConsoleDeviceID || c.SubsystemID != VirtioConsoleType || c.IOSize != ConsoleIOSize || c.IRQ != 12 {
		t.Errorf("PCI config %+v", c)
	}
	for _, tt := range []struct {
		off  uint16
		n    int
		want uint32
	}{
		{vioHostFeatures, 4, ConsoleFeatures},
		{vioGuestFeatures, 4, 0},
		{vioQueueNum, 2, ConsoleQueueSize},
		{vioStatus, 1, 0},
		{vioConfig + 0, 2, 0}, // cols
		{vioConfig + 2, 2, 0}, // rows
		{vioConfig + 4, 4, 1}, // max_nr_ports
		{vioConfig + 8, 4, 0}, // emerg_wr
	} {
		if got := e.p.read(tt.off, tt.n); got != tt.want {
			t.Errorf("read %d bytes at %#x = %#x, want %#x", tt.n, tt.off, got, tt.want)
		}
	}
	for q := range consoleQueues + 2 {
		e.p.write(vioQueueSel, 2, uint32(q))
		want := uint32(ConsoleQueueSize)
		if q >= consoleQueues {
			want = 0 // no such queue
		}
		if got := e.p.read(vioQueueNum, 2); got != want {
			t.Errorf("queue %d size %d, want %d", q, got, want)
		}
	}
	for _, a := range []struct {
		off uint16
		n   int
	}{{ConsoleIOSize - 1, 2}, {ConsoleIOSize, 1}, {0, 3}, {0, 8}} {
		if err := e.con.ReadBAR(a.off, make([]byte, a.n)); !errors.Is(err, ErrBadAccess) {
			t.Errorf("ReadBAR(%#x, %d bytes) = %v, want ErrBadAccess", a.off, a.n, err)
		}
	}
}

// TestConsoleFeatures: what the driver accepts is what the device uses:
// with MULTIPORT, data waits for the port to be opened through the control
// queue; without it, port 0 carries data at once and the control queues
// are not served.
func TestConsoleFeatures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		accept    uint32
		want      uint32
		multiport bool
	}{
		{"multiport", consoleFMultiport, consoleFMultiport, true},
		{"multiport and unoffered bits", consoleFMultiport | 1<<0 | 1<<28 | 1<<29, consoleFMultiport, true},
		{"none", 0, 0, false},
		{"only unoffered bits", 1 << 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newConsoleEnv(t, tt.accept)
			if got := e.p.read(vioGuestFeatures, 4); got != tt.want {
				t.Fatalf("guest features read back %#x, want %#x", got, tt.want)
			}
			e.postRX(consoleCtrlRXQ, 2, conBufSize)
			e.sendControl(^uint32(0), ctrlDeviceReady, 1)
			if got := len(e.controls()); (got == 1) != tt.multiport {
				t.Errorf("%d control messages after DEVICE_READY, multiport %v", got, tt.multiport)
			}
			e.postRX(consoleRXQ, 2, conBufSize)
			if err := e.con.Feed([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			e.isr()
			got := e.received(consoleRXQ)
			if tt.multiport {
				if len(got) != 0 {
					t.Fatalf("data delivered before the port was opened: %q", got)
				}
				e.sendControl(0, ctrlPortOpen, 1)
				got = e.received(consoleRXQ)
			}
			if len(got) != 1 || string(got[0]) != "ping" {
				t.Errorf("received %q, want one buffer \"ping\"", got)
			}
			e.check(t)
		})
	}
}

// TestConsoleHandshake: Linux's probe and port setup, message by message,
// then a program closing and reopening the port; the receive queues get
// NO_NOTIFY while the device has nothing for them.
func TestConsoleHandshake(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	e.handshake(4)
	for _, q := range []int{consoleRXQ, consoleCtrlRXQ} {
		if e.q[q].usedFlags()&usedFNoNotify == 0 {
			t.Errorf("queue %d: NO_NOTIFY clear with nothing pending", q)
		}
	}
	if e.q[consoleTXQ].usedFlags()&usedFNoNotify != 0 || e.q[consoleCtrlTXQ].usedFlags()&usedFNoNotify != 0 {
		t.Errorf("NO_NOTIFY set on a transmit queue")
	}
	st := e.con.State()
	if !st.DeviceReady || !st.PortReady || !st.GuestOpen || len(st.Control) != 0 {
		t.Errorf("state after the handshake %+v", st)
	}
	for _, tt := range []struct {
		id           uint32
		event, value uint16
		open         bool
		replies      []ctrl
		errs         uint64
	}{
		{0, ctrlPortOpen, 0, false, nil, 0}, // port_fops_release
		{0, ctrlPortOpen, 1, true, nil, 0},  // port_fops_open
		{0, ctrlPortReady, 1, true, []ctrl{{0, ctrlPortName, 1, conName}, {0, ctrlPortOpen, 1, ""}}, 0}, // hibernation restore
		{^uint32(0), ctrlDeviceReady, 1, true, []ctrl{{0, ctrlPortAdd, 1, ""}}, 0},                      // again: PORT_ADD again
		{1, ctrlPortOpen, 1, true, nil, 1},                                                              // no port 1
		{0, ctrlResize, 1, true, nil, 1},                                                                // not a driver's event
		{0, 99, 1, true, nil, 1},                                                                        // unknown event
		{^uint32(0), ctrlDeviceReady, 0, true, nil, 0},                                                  // driver failed: no answer
		{0, ctrlPortReady, 0, true, nil, 0},                                                             // port failed: no answer
	} {
		errs := e.con.Stats().Errors
		e.sendControl(tt.id, tt.event, tt.value)
		if got := e.controls(); !cmp.Equal(got, tt.replies, cmp.AllowUnexported(ctrl{})) {
			t.Errorf("control (%d, %d, %d): replies %+v, want %+v", tt.id, tt.event, tt.value, got, tt.replies)
		}
		if e.con.GuestOpen() != tt.open {
			t.Errorf("control (%d, %d, %d): open %v, want %v", tt.id, tt.event, tt.value, !tt.open, tt.open)
		}
		if got := e.con.Stats().Errors - errs; got != tt.errs {
			t.Errorf("control (%d, %d, %d): %d errors counted, want %d", tt.id, tt.event, tt.value, got, tt.errs)
		}
	}
	if e.status()&StatusNeedsReset != 0 {
		t.Errorf("NEEDS_RESET after well-formed control messages")
	}
	e.check(t)
}

// TestConsoleControlBacklog: messages for a driver that gives no control
// buffers wait, up to ConsoleControlLimit, and go out once it does.
func TestConsoleControlBacklog(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	for range ConsoleControlLimit + 5 {
		e.sendControl(^uint32(0), ctrlDeviceReady, 1)
	}
	if got := len(e.con.State().Control); got != ConsoleControlLimit {
		t.Fatalf("%d messages waiting, want %d", got, ConsoleControlLimit)
	}
	if got := e.con.Stats().Errors; got != 5 {
		t.Errorf("%d dropped messages counted, want 5", got)
	}
	if e.q[consoleCtrlRXQ].usedFlags()&usedFNoNotify != 0 {
		t.Fatalf("NO_NOTIFY set while messages wait")
	}
	e.postRX(consoleCtrlRXQ, ConsoleControlLimit, conBufSize)
	if got := len(e.controls()); got != ConsoleControlLimit {
		t.Errorf("%d messages delivered, want %d", got, ConsoleControlLimit)
	}
	// A buffer too short for PORT_NAME gets what fits.
	q := e.q[consoleCtrlRXQ]
	a := q.alloc(10)
	q.publish(q.chain(vbuf{a, 10, true}))
	e.sendControl(0, ctrlPortReady, 1)
	if _, lens := e.usedChains(consoleCtrlRXQ); len(lens) != 1 || lens[0] != 10 {
		t.Errorf("short control buffer: used lengths %v, want [10]", lens)
	}
	e.check(t)
}

// TestConsoleTransmit: chains of one or more readable descriptors go to out
// in order, complete with length 0 and interrupt unless suppressed.
func TestConsoleTransmit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		chains [][][]byte
		noIntr bool
		fail   bool
	}{
		{"one buffer", [][][]byte{{[]byte("hello")}}, false, false},
		{"three descriptors", [][][]byte{{[]byte("a"), []byte("bc"), []byte("def")}}, false, false},
		{"empty descriptors", [][][]byte{{{}, []byte("x"), {}}}, false, false},
		{"two chains one kick", [][][]byte{{[]byte("one")}, {[]byte("two")}}, false, false},
		{"no interrupt", [][][]byte{{[]byte("quiet")}}, true, false},
		{"host refuses", [][][]byte{{[]byte("lost")}}, false, true},
		{"16 KiB", [][][]byte{{bytes.Repeat([]byte{7}, 16<<10)}}, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newConsoleEnv(t, consoleFMultiport)
			e.handshake(2)
			e.isr()
			e.out.fail = tt.fail
			if tt.noIntr {
				e.q[consoleTXQ].setAvailFlags(availFNoIntr)
			}
			q := e.q[consoleTXQ]
			var want []byte
			for _, ch := range tt.chains {
				var bufs []vbuf
				for _, p := range ch {
					a := q.alloc(len(p))
					copy(e.ram[a:], p)
					bufs = append(bufs, vbuf{a, uint32(len(p)), false})
					want = append(want, p...)
				}
				q.publish(q.chain(bufs...))
			}
			e.p.kick(consoleTXQ)
			_, lens := e.usedChains(consoleTXQ)
			if len(lens) != len(tt.chains) || slices.ContainsFunc(lens, func(n uint32) bool { return n != 0 }) {
				t.Errorf("used lengths %v, want %d zeros", lens, len(tt.chains))
			}
			st := e.con.Stats()
			if tt.fail {
				want = nil
				if st.Dropped == 0 || st.TXBytes != 0 {
					t.Errorf("stats %+v: want the bytes dropped", st)
				}
			}
			if got := e.out.bytes(); !bytes.Equal(got, want) {
				t.Errorf("out got %d bytes %q, want %d", len(got), got[:min(len(got), 16)], len(want))
			}
			if got := e.irq.level(); got == tt.noIntr {
				t.Errorf("interrupt %v with NO_INTERRUPT %v", got, tt.noIntr)
			}
			e.check(t)
		})
	}
}

// TestConsoleReceive: Feed touches no guest RAM; the guest's ISR read (or
// its kick) puts the bytes in its buffers, chain by chain, and NO_NOTIFY
// tells it when the device wants to hear about new buffers.
func TestConsoleReceive(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		bufs  []int // receive chain sizes, in order (a negative size: a chain of three descriptors of -size/3)
		feeds [][]byte
		want  [][]byte // bytes per completed chain
		left  int      // bytes still waiting
	}{
		{"one message one buffer", []int{256}, [][]byte{[]byte("hello")}, [][]byte{[]byte("hello")}, 0},
		{"two feeds one buffer", []int{256, 256}, [][]byte{[]byte("ab"), []byte("cd")}, [][]byte{[]byte("abcd")}, 0},
		{"spread over buffers", []int{4, 4, 4}, [][]byte{[]byte("0123456789")}, [][]byte{[]byte("0123"), []byte("4567"), []byte("89")}, 0},
		{"more than the buffers", []int{4}, [][]byte{[]byte("0123456789")}, [][]byte{[]byte("0123")}, 6},
		{"chained descriptors", []int{-12}, [][]byte{[]byte("0123456789ab")}, [][]byte{[]byte("0123456789ab")}, 0},
		{"zero-length buffer", []int{0, 8}, [][]byte{[]byte("x")}, [][]byte{{}, []byte("x")}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newConsoleEnv(t, consoleFMultiport)
			e.handshake(0)
			e.isr()
			q := e.q[consoleRXQ]
			for _, n := range tt.bufs {
				if n >= 0 {
					q.publish(q.chain(vbuf{q.alloc(n), uint32(n), true}))
					continue
				}
				part := uint32(-n / 3)
				q.publish(q.chain(vbuf{q.alloc(int(part)), part, true}, vbuf{q.alloc(int(part)), part, true}, vbuf{q.alloc(int(part)), part, true}))
			}
			used := q.usedIdx()
			for _, f := range tt.feeds {
				if err := e.con.Feed(f); err != nil {
					t.Fatal(err)
				}
			}
			if q.usedIdx() != used {
				t.Fatalf("Feed wrote the used ring")
			}
			if !e.irq.level() {
				t.Fatalf("Feed raised no interrupt")
			}
			if got := e.isr(); got&isrQueue == 0 {
				t.Errorf("ISR %#x, want the queue bit", got)
			}
			ids, lens := e.usedChains(consoleRXQ)
			var got [][]byte
			for i, id := range ids {
				var b []byte
				for d, left := uint16(id), lens[i]; ; {
					a := e.descAddr(consoleRXQ, uint32(d))
					dl := binary.LittleEndian.Uint32(e.ram[q.base+descSize*uint64(d)+8:])
					k := min(dl, left)
					b, left = append(b, e.ram[a:a+uint64(k)]...), left-k
					if binary.LittleEndian.Uint16(e.ram[q.base+descSize*uint64(d)+12:])&descFNext == 0 {
						break
					}
					d = binary.LittleEndian.Uint16(e.ram[q.base+descSize*uint64(d)+14:])
				}
				got = append(got, b)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("chains (-want +got):\n%s", diff)
			}
			if st := e.con.State(); len(st.RX) != tt.left {
				t.Errorf("%d bytes waiting, want %d", len(st.RX), tt.left)
			}
			if nn := q.usedFlags()&usedFNoNotify != 0; nn != (tt.left == 0) {
				t.Errorf("NO_NOTIFY %v with %d bytes waiting", nn, tt.left)
			}
			if tt.left > 0 { // a kick with new buffers takes the rest
				e.postRX(consoleRXQ, 1, 64)
				if got := e.received(consoleRXQ); len(got) != 1 || len(got[0]) != tt.left {
					t.Errorf("after a kick: %q, want the %d bytes left", got, tt.left)
				}
			}
			e.check(t)
		})
	}
}

func TestConsoleFeedLimit(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	if err := e.con.Feed(make([]byte, ConsoleRXLimit)); err != nil {
		t.Fatal(err)
	}
	if err := e.con.Feed([]byte{1}); !errors.Is(err, ErrRXFull) {
		t.Errorf("Feed past the limit: %v, want ErrRXFull", err)
	}
	if e.irq.level() {
		t.Errorf("interrupt for a port nobody opened")
	}
}

// TestConsoleReset: a reset drops the port, the messages waiting and the
// host bytes not delivered (counted); the device works again after a probe.
func TestConsoleReset(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	e.handshake(0)
	if err := e.con.Feed([]byte("stale")); err != nil {
		t.Fatal(err)
	}
	e.p.write(vioStatus, 1, 0)
	st := e.con.State()
	if st.Status != 0 || st.GuestFeatures != 0 || st.DeviceReady || st.PortReady || st.GuestOpen || len(st.RX) != 0 || len(st.Control) != 0 {
		t.Errorf("state after reset %+v", st)
	}
	for i, q := range st.Queues {
		if q != (VirtqueueState{Size: ConsoleQueueSize}) {
			t.Errorf("queue %d after reset %+v", i, q)
		}
	}
	if got := e.con.Stats().RXDiscarded; got != 5 {
		t.Errorf("RXDiscarded %d, want 5", got)
	}
	if e.irq.level() {
		t.Errorf("line high after reset")
	}
	f := newConsoleEnv(t, consoleFMultiport) // fresh rings, same device type
	f.handshake(1)
	if err := f.con.Feed([]byte("fresh")); err != nil {
		t.Fatal(err)
	}
	f.isr()
	if got := f.received(consoleRXQ); len(got) != 1 || string(got[0]) != "fresh" {
		t.Errorf("after a new probe: %q", got)
	}
}

// consoleFault breaks one queue; the device must stop with NEEDS_RESET and a
// config interrupt, without hanging or touching memory outside RAM.
type consoleFault struct {
	name  string
	queue int
	build func(e *consoleEnv, q *vq) // publishes the bad chain
}

func consoleFaults() []consoleFault {
	one := func(e *consoleEnv, q *vq, addr uint64, n uint32, flags, next uint16) {
		q.setDesc(q.next, addr, n, flags, next)
		q.publish(q.next)
	}
	return []consoleFault{
		{"tx loop", consoleTXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 1, descFNext, q.next) }},
		{"tx chain longer than the queue", consoleTXQ, func(e *consoleEnv, q *vq) {
			for i := range uint16(ConsoleQueueSize) {
				q.setDesc(i, conHeap0, 1, descFNext, (i+1)%ConsoleQueueSize)
			}
			q.publish(0)
		}},
		{"tx next out of range", consoleTXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 1, descFNext, ConsoleQueueSize) }},
		{"tx head out of range", consoleTXQ, func(e *consoleEnv, q *vq) { q.publish(ConsoleQueueSize + 3) }},
		{"tx indirect", consoleTXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 16, descFIndirect, 0) }},
		{"tx writable buffer", consoleTXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 4, descFWrite, 0) }},
		{"tx buffer outside RAM", consoleTXQ, func(e *consoleEnv, q *vq) { one(e, q, conRAMSize-2, 4, 0, 0) }},
		{"tx buffer at the top of the address space", consoleTXQ, func(e *consoleEnv, q *vq) { one(e, q, ^uint64(0)-1, 4, 0, 0) }},
		{"tx chain over ConsoleMaxChain", consoleTXQ, func(e *consoleEnv, q *vq) { one(e, q, 0x100000, ConsoleMaxChain+1, 0, 0) }},
		{"tx avail idx too far ahead", consoleTXQ, func(e *consoleEnv, q *vq) {
			binary.LittleEndian.PutUint16(e.ram[q.base+q.l.descBytes+2:], ConsoleQueueSize+1)
		}},
		{"rx readable buffer", consoleRXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 4, 0, 0) }},
		{"rx loop", consoleRXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 4, descFWrite|descFNext, q.next) }},
		{"ctrl tx writable buffer", consoleCtrlTXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 8, descFWrite, 0) }},
		{"ctrl rx readable buffer", consoleCtrlRXQ, func(e *consoleEnv, q *vq) { one(e, q, conHeap0, 64, 0, 0) }},
	}
}

func TestConsoleFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range consoleFaults() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newConsoleEnv(t, consoleFMultiport)
			e.handshake(0)
			e.isr()
			switch tt.queue { // give the receive queues something to deliver
			case consoleRXQ:
				if err := e.con.Feed([]byte("data")); err != nil {
					t.Fatal(err)
				}
			case consoleCtrlRXQ: // use up the five buffers the handshake left, then one waits
				for range 6 {
					e.sendControl(^uint32(0), ctrlDeviceReady, 1)
				}
			}
			tt.build(e, e.q[tt.queue])
			e.p.kick(tt.queue)
			if st := e.status(); st&StatusNeedsReset == 0 {
				t.Fatalf("status %#x: NEEDS_RESET not set", st)
			}
			if !e.irq.level() || e.isr()&isrConfig == 0 {
				t.Errorf("no config interrupt")
			}
			if e.con.Stats().Errors == 0 {
				t.Errorf("no error counted")
			}
			// Stopped: good chains wait until the driver resets the device.
			before := e.q[consoleTXQ].usedIdx()
			e.transmit([]byte("later"))
			if e.q[consoleTXQ].usedIdx() != before || len(e.out.bytes()) != 0 {
				t.Errorf("a stopped device transmitted")
			}
			e.p.write(vioStatus, 1, e.status()&^StatusNeedsReset|StatusFailed)
			if e.status()&StatusNeedsReset == 0 {
				t.Errorf("NEEDS_RESET cleared by a status write")
			}
			e.check(t)
		})
	}
}

// TestConsoleRingsOutsideRAM: a queue the driver put outside RAM stops the
// device at its first use.
func TestConsoleRingsOutsideRAM(t *testing.T) {
	t.Parallel()
	for _, pfn := range []uint32{conRAMSize/4096 - 1, 0xffffffff} {
		e := newConsoleEnv(t, consoleFMultiport)
		e.p.write(vioQueueSel, 2, consoleTXQ)
		e.p.write(vioQueuePFN, 4, pfn)
		e.p.kick(consoleTXQ)
		if e.status()&StatusNeedsReset == 0 {
			t.Errorf("PFN %#x: NEEDS_RESET not set", pfn)
		}
		e.check(t)
	}
}

// TestConsoleShortControl: a control message shorter than its header is
// completed and ignored, not fatal.
func TestConsoleShortControl(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	q := e.q[consoleCtrlTXQ]
	a := q.alloc(4)
	q.publish(q.chain(vbuf{a, 4, false}))
	e.p.kick(consoleCtrlTXQ)
	if q.usedIdx() != 1 || e.status()&StatusNeedsReset != 0 || e.con.Stats().Errors != 1 {
		t.Errorf("used %d, status %#x, stats %+v", q.usedIdx(), e.status(), e.con.Stats())
	}
}

// conversation is a stretch of traffic both ways: host bytes fed and
// delivered, the guest transmitting, giving buffers back, and a control
// message waiting.
func conversation(e *consoleEnv, round int) {
	e.t.Helper()
	msg := []byte(strings.Repeat(string(rune('a'+round)), 300)) // more than one buffer
	if err := e.con.Feed(msg); err != nil {
		e.t.Fatal(err)
	}
	e.isr()
	for _, b := range e.received(consoleRXQ) {
		e.transmit(b) // echo
	}
	e.postRX(consoleRXQ, 2, conBufSize)
	e.sendControl(^uint32(0), ctrlDeviceReady, 1) // PORT_ADD waits: no control buffer
}

// TestConsoleStateMidConversation: State taken mid-conversation (bytes
// waiting, a control message waiting, queues part-used) and put back with
// the RAM of that moment makes the device redo the same work the same way:
// cursors in RAM and in the device revert together.
func TestConsoleStateMidConversation(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	e.handshake(3)
	for range 5 { // use up the control buffers the handshake left
		e.sendControl(^uint32(0), ctrlDeviceReady, 1)
	}
	e.controls()
	conversation(e, 0)
	if err := e.con.Feed([]byte("pending")); err != nil {
		t.Fatal(err)
	}
	st := e.con.State()
	if len(st.RX) != len("pending") || len(st.Control) != 1 || !st.GuestOpen {
		t.Fatalf("mid-conversation state %+v: want bytes and a message waiting", st)
	}
	// The guest's part: RAM and the test driver's cursors (which a real
	// driver keeps in RAM).
	ram := append([]byte(nil), e.ram...)
	seen, out := e.seen, len(e.out.bytes())
	var drv [consoleQueues]vq
	for i, q := range e.q {
		drv[i] = *q
	}

	conversation(e, 1)
	conversation(e, 2)
	ram1, out1 := append([]byte(nil), e.ram...), e.out.bytes()[out:]

	copy(e.ram, ram)
	if err := e.con.SetState(st); err != nil {
		t.Fatal(err)
	}
	if got := e.irq.level(); got != (st.ISR != 0) {
		t.Errorf("line %v after SetState with ISR %#x", got, st.ISR)
	}
	if diff := cmp.Diff(st, e.con.State()); diff != "" {
		t.Fatalf("State after SetState (-want +got):\n%s", diff)
	}
	e.seen, e.out.writes = seen, [][]byte{e.out.bytes()[:out]}
	for i := range e.q {
		*e.q[i] = drv[i]
	}
	conversation(e, 1)
	conversation(e, 2)
	if !bytes.Equal(e.ram, ram1) {
		t.Errorf("RAM after the replay differs from the first run")
	}
	if got := e.out.bytes()[out:]; !bytes.Equal(got, out1) {
		t.Errorf("host got %q on the replay, want %q", got, out1)
	}
	e.check(t)
}

func TestConsoleSetStateRejects(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	good := e.con.State()
	for _, tt := range []struct {
		name string
		edit func(s *ConsoleState)
	}{
		{"other name", func(s *ConsoleState) { s.Name = "other" }},
		{"other features", func(s *ConsoleState) { s.HostFeatures = 0 }},
		{"unoffered guest feature", func(s *ConsoleState) { s.GuestFeatures |= 1 }},
		{"ISR bits", func(s *ConsoleState) { s.ISR = 4 }},
		{"too few queues", func(s *ConsoleState) { s.Queues = s.Queues[:2] }},
		{"queue size", func(s *ConsoleState) { s.Queues = slices.Clone(s.Queues); s.Queues[1].Size = 256 }},
		{"too many receive bytes", func(s *ConsoleState) { s.RX = make([]byte, ConsoleRXLimit+1) }},
		{"too many messages", func(s *ConsoleState) { s.Control = make([][]byte, ConsoleControlLimit+1) }},
		{"short message", func(s *ConsoleState) { s.Control = [][]byte{{1, 2}} }},
		{"long message", func(s *ConsoleState) { s.Control = [][]byte{make([]byte, ctrlMsgMax+1)} }},
	} {
		s := good
		tt.edit(&s)
		if err := e.con.SetState(s); !errors.Is(err, ErrBadState) {
			t.Errorf("%s: SetState = %v, want ErrBadState", tt.name, err)
		}
	}
	if diff := cmp.Diff(good, e.con.State()); diff != "" {
		t.Errorf("a refused SetState changed the device (-want +got):\n%s", diff)
	}
	e.irq.err = errors.New("ioctl failed")
	if err := e.con.SetState(good); err == nil {
		t.Errorf("SetState hid the IRQ error")
	}
}

// TestConsoleThroughBus: the console on the PCI bus next to a block
// device, reached through its BAR window.
func TestConsoleThroughBus(t *testing.T) {
	t.Parallel()
	e := newConsoleDevice(t)
	bus := NewPCIBus()
	blk, err := NewBlock(newMemBackend(t, testDisk), "lane0", e.ram, nil, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []PCIDevice{blk, e.con} {
		if _, err := bus.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	port := uint16(PCIIOBase + 2*PCIIOStride) // slot 2
	pd, ok := bus.Route(port + vioQueueNum)
	if !ok {
		t.Fatal("console BAR not routed")
	}
	d := make([]byte, 2)
	if err := pd.In(port+vioQueueNum, d); err != nil || binary.LittleEndian.Uint16(d) != ConsoleQueueSize {
		t.Errorf("queue size through the bus: %v %v", d, err)
	}
	if _, ok := bus.Route(port + ConsoleIOSize); ok {
		t.Errorf("port past the console's BAR routed")
	}
}

// TestConsoleConcurrentHost: host goroutines feed while the vCPU side
// reads the ISR, transmits and gives buffers back; every byte arrives once,
// in order (run with -race).
func TestConsoleConcurrentHost(t *testing.T) {
	t.Parallel()
	e := newConsoleEnv(t, consoleFMultiport)
	e.handshake(64)
	const n = 200
	var want []byte
	for i := range n {
		want = append(want, []byte(strings.Repeat(string(rune('A'+i%26)), 1+i%7))...)
	}
	deadline := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			p := []byte(strings.Repeat(string(rune('A'+i%26)), 1+i%7))
			for errors.Is(e.con.Feed(p), ErrRXFull) && time.Now().Before(deadline) {
			}
		}
	}()
	var got []byte
	for len(got) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d bytes in 10 s", len(got), len(want))
		}
		e.isr()
		bufs := e.received(consoleRXQ)
		for _, b := range bufs {
			got = append(got, b...)
		}
		e.postRX(consoleRXQ, len(bufs), conBufSize)
		e.con.Stats()
		e.con.State()
	}
	wg.Wait()
	if !bytes.Equal(got, want) {
		t.Errorf("got %d bytes, want %d (in order)", len(got), len(want))
	}
}
