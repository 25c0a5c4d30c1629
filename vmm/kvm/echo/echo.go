package echo

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/themisfs/themis/vmm/kvm"
	"github.com/themisfs/themis/vmm/kvm/devices"
	"github.com/themisfs/themis/vmm/kvm/x86asm"
)

// The echo guests: synthetic programs that wait for a message of a fixed
// size on the agent channel and send it back, forever, the way Linux's
// drivers move it (as close as a guest without a kernel gets), so that the
// channel's cost per message can be measured on /dev/kvm without booting
// Linux. Measure runs them; BenchmarkChannel and `themisctl bench
// channel` report them.

// Channel names the device an echo guest talks through.
type Channel string

const (
	// UART is COM2, byte by byte: on its receive interrupt the guest
	// reads IIR, then LSR and RBR for every byte (the 8250 driver's
	// serial8250_rx_chars loop); it transmits every byte with an OUT to
	// THR and reads LSR once per 16 bytes (the 16550A FIFO load
	// serial8250_tx_chars writes per THRE interrupt). Per message of n
	// bytes: 2n+1 exits in, n+n/16 out.
	UART Channel = "uart"
	// Console is the agent console's virtio port: on its interrupt the
	// guest reads the ISR (where the device fills the receive buffers,
	// 4 KiB each, as Linux's fill_queue posts them), gives the buffers back
	// (no kick while the device says NO_NOTIFY) and transmits the message
	// as one buffer with one notify (Linux's port_fops_write: one buffer
	// per write of up to 32 KiB), then reads the ISR for the transmit
	// interrupt.
	Console Channel = "virtio-console"
)

// MaxSize is the largest echo message: 16 receive buffers of 4 KiB.
const MaxSize = 64 << 10

// Config describes one Measure run.
type Config struct {
	// Channel is the device the guest echoes through.
	Channel Channel
	// Size is the message size in bytes, 1 to MaxSize; for Console
	// the message must take 1, 2, 4, 8 or 16 receive buffers of 4 KiB.
	Size int
	// Messages is the number of round trips measured (at least 1), after
	// Warmup round trips that are not.
	Messages, Warmup int
}

// Result is what Measure measured: Messages round trips of one
// message each way.
type Result struct {
	Channel  Channel `json:"channel"`
	Size     int     `json:"size"`
	Messages int     `json:"messages"`
	// Exits is the vCPU exits the VMM served during the measured round
	// trips (Stats.Exits); ExitsPerEcho is Exits per round trip.
	Exits        uint64  `json:"exits"`
	ExitsPerEcho float64 `json:"exits_per_echo"`
	// Elapsed is the wall time of the measured round trips, host write to
	// host read of the whole echo; NsPerEcho per round trip.
	Elapsed   time.Duration `json:"elapsed_ns"`
	NsPerEcho float64       `json:"ns_per_echo"`
}

// Synthetic layout of the echo guests (guest-physical = guest-virtual).
const (
	echoIDTAddr  = 0x28000      // after the page tables
	echoBufAddr  = kvm.DataAddr // the UART guest's message buffer
	echoRingAddr = 0x200000     // the console's queue q at echoRingAddr + q*echoRingStride
	echoCtrlAddr = 0x280000     // the PORT_OPEN the host sends for the guest
	echoRXAddr   = 0x300000     // receive buffer i at echoRXAddr + i*echoRXBuf
	echoRXBuf    = 4096
	// echoRingStride is one 128-entry ring (descriptors and avail ring in
	// one page, the used ring in the next).
	echoRingStride = 0x2000
	echoVector     = 0x20 // PIC master vector base (ICW2)
)

// echoBuffers is the number of 4 KiB receive buffers a message takes on
// the console, or an error when the echo guest cannot carry it.
func echoBuffers(cfg Config) (int, error) {
	if cfg.Size < 1 || cfg.Size > MaxSize {
		return 0, fmt.Errorf("echo: message of %d bytes: want 1 to %d", cfg.Size, MaxSize)
	}
	k := (cfg.Size + echoRXBuf - 1) / echoRXBuf
	if cfg.Channel == Console && devices.ConsoleQueueSize%k != 0 {
		return 0, fmt.Errorf("echo: message of %d bytes takes %d receive buffers: want 1, 2, 4, 8 or 16", cfg.Size, k)
	}
	return k, nil
}

// echoPrologue jumps over the interrupt handler (an IRET: the guest only
// waits for interrupts, it never handles one) and programs the PIC:
// vectors from echoVector, auto-EOI, every line masked but irq.
func echoPrologue(irq uint8) (*x86asm.Asm, uint64) {
	a := new(x86asm.Asm).Emit(0xeb, 0x02) // jmp over the handler
	handler := uint64(kvm.CodeAddr + a.Label())
	a.Iretq()
	a.Outb(0x20, 0x11).Outb(0x21, echoVector).Outb(0x21, 0x04).Outb(0x21, 0x03) // ICW1-4: edge, base, slave on 2, 8086 + AEOI
	a.Outb(0x21, ^uint8(1<<irq))
	return a, handler
}

// echoIDT is the IDT for the PIC's 16 vectors, every gate to handler.
func echoIDT(handler uint64) []byte {
	idt := make([]byte, 256*16)
	for v := echoVector; v < echoVector+16; v++ {
		g := idt[16*v:]
		binary.LittleEndian.PutUint16(g[0:], uint16(handler))
		binary.LittleEndian.PutUint16(g[2:], 0x08) // the 64-bit code segment
		g[5] = 0x8e                                // present, DPL 0, interrupt gate
		binary.LittleEndian.PutUint16(g[6:], uint16(handler>>16))
		binary.LittleEndian.PutUint32(g[8:], uint32(handler>>32))
	}
	return idt
}

// uartEchoProgram echoes size bytes on COM2 (see UART).
func uartEchoProgram(size int) (prog []byte, handler uint64) {
	const base = devices.COM2Port
	const rbr, ier, iir, lsr = base, base + 1, base + 2, base + 5
	a, handler := echoPrologue(devices.COM2IRQ)
	a.Outb(ier, 0x01) // receive interrupt; OUT2 is set (firmware state)
	msg := a.Label()
	a.MovImm(x86asm.RDI, echoBufAddr).MovImm(x86asm.RCX, uint64(size))
	wait := a.Label()
	a.Sti().Hlt().Cli().Inb(iir)
	rx := a.Label()
	a.Inb(lsr).TestAL(0x01).Jcc(x86asm.CCZ, wait) // no byte yet: wait for the next interrupt
	a.Inb(rbr).StoreALAtRDI().DecRCX().JnzTo(rx)
	a.MovImm(x86asm.RSI, echoBufAddr).MovImm(x86asm.RCX, uint64(size)).MovImm(x86asm.R8, 16)
	tx := a.Label()
	a.Emit(0xba).Imm32(rbr).LoadALFromRSI().Emit(0xee) // mov edx, THR; mov al, [rsi]; inc rsi; out dx, al
	a.DecR8()
	skip := a.JccFwd(x86asm.CCNZ)
	a.Inb(lsr).MovImm(x86asm.R8, 16)
	a.Land(skip)
	a.DecRCX().JnzTo(tx)
	a.Jmp(msg)
	return a.Bytes(), handler
}

// consoleEchoProgram echoes size bytes (k receive buffers) on the agent
// console whose BAR0 is at bar (see Console). r12 counts the receive
// chains used, r13 the receive avail index, r14 the transmit avail index.
func consoleEchoProgram(k int, bar uint16) (prog []byte, handler uint64) {
	l := echoLayout()
	a, handler := echoPrologue(devices.ConsoleIRQ)
	a.MovImm(x86asm.R12, 0).MovImm(x86asm.R13, devices.ConsoleQueueSize).MovImm(x86asm.R14, 0)
	// First look without waiting: host bytes fed before the PIC was
	// programmed raised the line unseen (the PIC's init forgets it).
	first := a.JmpFwd()
	wait := a.Label()
	a.Sti().Hlt().Cli()
	a.Land(first)
	a.Inb(bar + 19) // the ISR: the device fills the receive buffers here
	a.MovImm(x86asm.RBX, l.rxUsed+2).LoadWordRBX().SubEAXR12().AndEAX(0xffff).CmpEAX(uint32(k)).Jcc(x86asm.CCB, wait)
	a.AddR32(x86asm.R12, uint32(k))
	a.AddR32(x86asm.R13, uint32(k)).MovImm(x86asm.RBX, l.rxAvail+2).StoreWordAtRBX(x86asm.R13) // the buffers back
	a.MovImm(x86asm.RBX, l.rxUsed).TestByteRBX(1)
	skip := a.JccFwd(x86asm.CCNZ) // NO_NOTIFY: no kick
	a.Outw(bar+16, 0)
	a.Land(skip)
	a.IncR32(x86asm.R14).MovImm(x86asm.RBX, l.txAvail+2).StoreWordAtRBX(x86asm.R14) // the echo, one buffer
	a.MovImm(x86asm.RBX, l.txUsed).TestByteRBX(1)
	skip = a.JccFwd(x86asm.CCNZ)
	a.Outw(bar+16, 1)
	a.Land(skip)
	a.Jmp(wait)
	return a.Bytes(), handler
}

// echoRings is where the echo guest's queues lie.
type echoRings struct {
	rxDesc, rxAvail, rxUsed uint64
	txDesc, txAvail, txUsed uint64
}

func echoLayout() echoRings {
	const n = devices.ConsoleQueueSize
	ring := func(q uint64) (desc, avail, used uint64) {
		desc = echoRingAddr + q*echoRingStride
		return desc, desc + 16*n, desc + 0x1000
	}
	var r echoRings
	r.rxDesc, r.rxAvail, r.rxUsed = ring(0)
	r.txDesc, r.txAvail, r.txUsed = ring(1)
	return r
}

// ramWrite is b at guest-physical addr.
type ramWrite struct {
	addr uint64
	b    []byte
}

// consoleEchoRings are the rings the echo guest starts with: 128 receive buffers of 4 KiB, all available; 128/k
// transmit descriptors, each one buffer over the k receive buffers a
// message lands in (message m in buffers m*k%128 to m*k%128+k-1), the
// transmit avail ring filled in that order, nothing available yet; and one
// PORT_OPEN on the control transmit queue (which, as Linux's, asks for no
// interrupts).
func consoleEchoRings(size, k int) []ramWrite {
	const n = devices.ConsoleQueueSize
	l := echoLayout()
	rxDesc, rxAvail := make([]byte, 16*n), make([]byte, 4+2*n)
	for i := range n {
		d := rxDesc[16*i:]
		binary.LittleEndian.PutUint64(d, echoRXAddr+uint64(i)*echoRXBuf)
		binary.LittleEndian.PutUint32(d[8:], echoRXBuf)
		binary.LittleEndian.PutUint16(d[12:], 2) // VRING_DESC_F_WRITE
		binary.LittleEndian.PutUint16(rxAvail[4+2*i:], uint16(i))
	}
	binary.LittleEndian.PutUint16(rxAvail[2:], n)
	txDesc, txAvail := make([]byte, 16*n), make([]byte, 4+2*n)
	for g := range n / k {
		d := txDesc[16*g:]
		binary.LittleEndian.PutUint64(d, echoRXAddr+uint64(g*k)*echoRXBuf)
		binary.LittleEndian.PutUint32(d[8:], uint32(size))
	}
	for p := range n {
		binary.LittleEndian.PutUint16(txAvail[4+2*p:], uint16(p%(n/k)))
	}
	ctrl := make([]byte, 8) // port 0, VIRTIO_CONSOLE_PORT_OPEN, 1
	binary.LittleEndian.PutUint16(ctrl[4:], 6)
	binary.LittleEndian.PutUint16(ctrl[6:], 1)
	ctrlDesc := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint64(nil, echoCtrlAddr), 8)
	ctrlRing := uint64(echoRingAddr + 3*echoRingStride)
	return []ramWrite{
		{l.rxDesc, rxDesc}, {l.rxAvail, rxAvail}, {l.txDesc, txDesc}, {l.txAvail, txAvail},
		{echoCtrlAddr, ctrl}, {ctrlRing, append(ctrlDesc, 0, 0, 0, 0)},
		// avail: NO_INTERRUPT (Linux's c_ovq has no callback), idx 1, ring[0] = 0
		{ctrlRing + 16*n, []byte{1, 0, 1, 0, 0, 0}},
	}
}
