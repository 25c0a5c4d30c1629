package devices

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
)

// Console test layout: the four queues at PFNs 1, 3, 5, 7 (a 128-entry ring
// takes two pages), each queue's buffers from its own 256 KiB heap.
const (
	conRAMSize = 4 << 20
	conPFN0    = 1
	conHeap0   = 0x20000
	conHeapLen = 0x40000
	conBufSize = 256 // receive buffers in tests (Linux uses 4 KiB)
	conName    = "themis.agent"
)

// recWriter records every Write; it fails them while fail is set.
type recWriter struct {
	mu     sync.Mutex
	writes [][]byte
	fail   bool
}

func (w *recWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail {
		return 0, errors.New("full")
	}
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (w *recWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Join(w.writes, nil)
}

// consoleEnv is a Console with a driver replaying what Linux's
// virtio_console does, in guest RAM and through the BAR.
type consoleEnv struct {
	t     testing.TB
	con   *Console
	p     bar
	ram   RAM
	check func(testing.TB)
	irq   *fakeIRQ
	out   *recWriter
	q     [consoleQueues]*vq
	seen  [consoleQueues]uint16 // used entries the driver consumed, per queue
	kicks [consoleQueues]int    // notifies the driver wrote, per queue
}

func newConsoleDevice(t testing.TB) *consoleEnv {
	t.Helper()
	return newConsoleDeviceIn(t, conRAMSize, conHeap0, conHeapLen)
}

// newConsoleDeviceIn is newConsoleDevice with size bytes of RAM and each
// queue's buffers in heapLen bytes from heap0.
func newConsoleDeviceIn(t testing.TB, size int, heap0, heapLen uint64) *consoleEnv {
	t.Helper()
	ram, check := guardedRAM(size)
	irq, out := &fakeIRQ{}, &recWriter{}
	con, err := NewConsole(conName, ram, irq, 12, out)
	if err != nil {
		t.Fatal(err)
	}
	e := &consoleEnv{t: t, con: con, p: bar{t, con}, ram: ram, check: check, irq: irq, out: out}
	for i := range e.q {
		e.q[i] = newVQSize(t, ram, conPFN0+2*uint32(i), ConsoleQueueSize)
		e.q[i].heap = heap0 + uint64(i)*heapLen
	}
	return e
}

// newConsoleEnv probes the device as virtcons_probe does, accepting
// features, and sets up all four queues.
func newConsoleEnv(t testing.TB, features uint32) *consoleEnv {
	t.Helper()
	e := newConsoleDevice(t)
	e.probe(features)
	return e
}

func (e *consoleEnv) probe(features uint32) {
	e.t.Helper()
	p := e.p
	p.write(vioStatus, 1, 0)
	p.write(vioStatus, 1, StatusAcknowledge)
	p.write(vioStatus, 1, StatusAcknowledge|StatusDriver)
	if host := p.read(vioHostFeatures, 4); host != ConsoleFeatures {
		e.t.Fatalf("host features %#x, want %#x", host, ConsoleFeatures)
	}
	p.write(vioGuestFeatures, 4, features)
	var nr [4]byte // virtio_cread_feature reads the config bytewise (legacy)
	for i := range nr {
		nr[i] = byte(p.read(vioConfig+4+uint16(i), 1))
	}
	if got := binary.LittleEndian.Uint32(nr[:]); features&consoleFMultiport != 0 && got != 1 {
		e.t.Fatalf("max_nr_ports = %d, want 1", got)
	}
	n := 2
	if features&consoleFMultiport != 0 {
		n = consoleQueues
	}
	for i := range n {
		p.write(vioQueueSel, 2, uint32(i))
		if got := p.read(vioQueueNum, 2); got != ConsoleQueueSize {
			e.t.Fatalf("queue %d size %d", i, got)
		}
		if got := p.read(vioQueuePFN, 4); got != 0 {
			e.t.Fatalf("queue %d PFN %#x before setup", i, got)
		}
		p.write(vioQueuePFN, 4, conPFN0+2*uint32(i))
	}
	p.write(vioStatus, 1, StatusAcknowledge|StatusDriver|StatusDriverOK)
}

// kickIfNeeded notifies q unless the device set NO_NOTIFY (Linux's
// virtqueue_kick).
func (e *consoleEnv) kickIfNeeded(q int) {
	e.t.Helper()
	if e.q[q].usedFlags()&usedFNoNotify == 0 {
		e.kicks[q]++
		e.p.kick(q)
	}
}

// postRX gives n receive buffers of size bytes, each its own chain, to
// queue q, kicking after each as add_inbuf does; it returns their
// addresses.
func (e *consoleEnv) postRX(q, n, size int) []uint64 {
	e.t.Helper()
	var addrs []uint64
	for range n {
		a := e.q[q].alloc(size)
		addrs = append(addrs, a)
		e.q[q].publish(e.q[q].chain(vbuf{a, uint32(size), true}))
		e.kickIfNeeded(q)
	}
	return addrs
}

// sendControl sends one control message as __send_control_msg does.
func (e *consoleEnv) sendControl(id uint32, event, value uint16) {
	e.t.Helper()
	a := e.q[consoleCtrlTXQ].alloc(ctrlHeaderSize)
	copy(e.ram[a:], ctrlMsg(id, event, value, ""))
	e.q[consoleCtrlTXQ].publish(e.q[consoleCtrlTXQ].chain(vbuf{a, ctrlHeaderSize, false}))
	e.kickIfNeeded(consoleCtrlTXQ)
}

// transmit sends one chain with a readable descriptor per part.
func (e *consoleEnv) transmit(parts ...[]byte) {
	e.t.Helper()
	q := e.q[consoleTXQ]
	var bufs []vbuf
	for _, p := range parts {
		a := q.alloc(len(p))
		copy(e.ram[a:], p)
		bufs = append(bufs, vbuf{a, uint32(len(p)), false})
	}
	q.publish(q.chain(bufs...))
	e.kickIfNeeded(consoleTXQ)
}

// usedChains returns the chains queue q completed since the last call:
// their heads and lengths.
func (e *consoleEnv) usedChains(q int) (ids, lens []uint32) {
	for ; e.seen[q] != e.q[q].usedIdx(); e.seen[q]++ {
		id, n := e.q[q].used(e.seen[q])
		ids, lens = append(ids, id), append(lens, n)
	}
	return ids, lens
}

// descAddr is the buffer address of descriptor id of queue q.
func (e *consoleEnv) descAddr(q int, id uint32) uint64 {
	return binary.LittleEndian.Uint64(e.ram[e.q[q].base+descSize*uint64(id):])
}

// received returns the bytes the device put into queue q's buffers since
// the last call (single-descriptor chains, as postRX makes them).
func (e *consoleEnv) received(q int) [][]byte {
	ids, lens := e.usedChains(q)
	var out [][]byte
	for i, id := range ids {
		a := e.descAddr(q, id)
		out = append(out, append([]byte(nil), e.ram[a:a+uint64(lens[i])]...))
	}
	return out
}

// ctrl is a decoded control message.
type ctrl struct {
	id           uint32
	event, value uint16
	name         string
}

// controls decodes the control messages delivered since the last call.
func (e *consoleEnv) controls() []ctrl {
	var out []ctrl
	for _, m := range e.received(consoleCtrlRXQ) {
		if len(m) < ctrlHeaderSize {
			e.t.Fatalf("control message of %d bytes", len(m))
		}
		c := ctrl{binary.LittleEndian.Uint32(m), binary.LittleEndian.Uint16(m[4:]), binary.LittleEndian.Uint16(m[6:]), ""}
		if len(m) > ctrlHeaderSize {
			c.name = string(bytes.TrimRight(m[ctrlHeaderSize:], "\x00"))
		}
		out = append(out, c)
	}
	return out
}

// handshake runs Linux's probe-time exchange with MULTIPORT: control
// buffers, DEVICE_READY, PORT_ADD; the port's receive buffers,
// PORT_READY, PORT_NAME and PORT_OPEN; then a program opens the port.
func (e *consoleEnv) handshake(rxBufs int) {
	e.t.Helper()
	e.postRX(consoleCtrlRXQ, 8, conBufSize)
	e.sendControl(^uint32(0), ctrlDeviceReady, 1)
	if got := e.controls(); len(got) != 1 || got[0] != (ctrl{0, ctrlPortAdd, 1, ""}) {
		e.t.Fatalf("after DEVICE_READY: %+v, want PORT_ADD for port 0", got)
	}
	e.postRX(consoleRXQ, rxBufs, conBufSize)
	e.sendControl(0, ctrlPortReady, 1)
	want := []ctrl{{0, ctrlPortName, 1, conName}, {0, ctrlPortOpen, 1, ""}}
	if got := e.controls(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		e.t.Fatalf("after PORT_READY: %+v, want %+v", got, want)
	}
	e.sendControl(0, ctrlPortOpen, 1)
	if !e.con.GuestOpen() {
		e.t.Fatalf("port not open after the guest's PORT_OPEN")
	}
}

func (e *consoleEnv) status() uint32 { e.t.Helper(); return e.p.read(vioStatus, 1) }

func (e *consoleEnv) isr() uint32 { e.t.Helper(); return e.p.read(vioISR, 1) }
