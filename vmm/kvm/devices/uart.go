package devices

import (
	"fmt"
	"io"
	"sync"
)

// UARTRXLimit bounds a UART's receive queue, in bytes.
const UARTRXLimit = 1 << 20

// uartFIFOSize is the 16550A's receive FIFO depth; it bounds only bytes the
// guest sends itself in loopback mode (the host side queues up to UARTRXLimit).
const uartFIFOSize = 16

// Register offsets from the base port (DLAB is LCR bit 7).
const (
	uartRBR = 0 // read: receive buffer; write: THR; DLAB: divisor latch low
	uartIER = 1 // interrupt enable; DLAB: divisor latch high
	uartIIR = 2 // read: interrupt identification; write: FCR
	uartLCR = 3
	uartMCR = 4
	uartLSR = 5
	uartMSR = 6
	uartSCR = 7
)

// Register bits (mirrors include/uapi/linux/serial_reg.h).
const (
	ierRDI  = 0x01 // received data available
	ierTHRI = 0x02 // transmit holding register empty
	ierRLSI = 0x04 // receiver line status
	ierMSI  = 0x08 // modem status
	ierMask = 0x0f // a 16550A implements only the low four bits

	iirNoInt  = 0x01
	iirMSI    = 0x00
	iirTHRI   = 0x02
	iirRDI    = 0x04
	iirRLSI   = 0x06
	iirFIFOOn = 0xc0 // both "FIFO enabled" bits, as a 16550A reports them

	fcrEnable  = 0x01
	fcrClearRX = 0x02
	fcrKept    = 0xc9 // enable, DMA mode and RX trigger level are remembered

	lcrDLAB = 0x80

	mcrDTR  = 0x01
	mcrRTS  = 0x02
	mcrOUT1 = 0x04
	mcrOUT2 = 0x08 // gates the interrupt output onto the PC's IRQ line
	mcrLoop = 0x10
	mcrMask = 0x1f

	lsrDR      = 0x01
	lsrOE      = 0x02
	lsrErrors  = 0x1e // OE, PE, FE, BI: the line-status interrupt sources
	lsrTHRE    = 0x20
	lsrTEMT    = 0x40
	lsrFIFOErr = 0x80
	lsrSticky  = lsrErrors | lsrFIFOErr // cleared by reading LSR

	msrDCTS  = 0x01
	msrDDSR  = 0x02
	msrTERI  = 0x04
	msrDDCD  = 0x08
	msrDelta = 0x0f
	msrCTS   = 0x10
	msrDSR   = 0x20
	msrRI    = 0x40
	msrDCD   = 0x80
	// msrHostLines are the modem inputs outside loopback: a connected,
	// ready peer (carrier, DSR and CTS asserted, no ring).
	msrHostLines = msrDCD | msrDSR | msrCTS
)

// UARTStats counts a UART's traffic.
type UARTStats struct {
	// TXBytes is the number of bytes the guest transmitted that out accepted.
	TXBytes uint64
	// RXBytes is the number of bytes the guest read from the receive buffer.
	RXBytes uint64
	// Dropped is the number of transmitted bytes lost because out returned
	// an error.
	Dropped uint64
	// RXDiscarded is the number of queued receive bytes the guest discarded
	// by resetting the receive FIFO (FCR bit 1).
	RXDiscarded uint64
}

// UARTState is a UART's complete state, for checkpoints. IIR, DR, THRE and
// TEMT are derived from it.
type UARTState struct {
	// IER is the interrupt enable register (bits 0-3).
	IER uint8
	// FCR is the FIFO control register as last programmed: enable, DMA mode
	// and receive trigger bits (mask 0xc9); 0 when the FIFO is off.
	FCR uint8
	// LCR is the line control register (bit 7 is DLAB).
	LCR uint8
	// MCR is the modem control register (bits 0-4; bit 4 is loopback).
	MCR uint8
	// LSR holds the sticky line status bits not yet read (OE, PE, FE, BI and
	// bit 7, mask 0x9e); DR, THRE and TEMT are derived.
	LSR uint8
	// MSR is the modem status register: input lines (high nibble) and the
	// delta bits not yet read (low nibble).
	MSR uint8
	// SCR is the scratch register.
	SCR uint8
	// DLL and DLM are the divisor latch, low and high bytes.
	DLL, DLM uint8
	// THREPending says a transmitter-empty interrupt is pending (set when
	// the guest enables it or writes THR; cleared by an IIR read that
	// reports it or by disabling it).
	THREPending bool
	// RX holds the received bytes the guest has not read yet, oldest first.
	RX []byte
}

// UART is a 16550A serial port at a fixed base port, with transmission that
// completes instantly: every byte the guest writes to THR goes straight to
// the host's writer, and THRE and TEMT always read as set.
type UART struct {
	base uint16
	irq  IRQ
	out  io.Writer

	mu         sync.Mutex
	ier        uint8
	fcr        uint8
	lcr        uint8
	mcr        uint8
	lsr        uint8 // sticky bits only
	msr        uint8
	scr        uint8
	dll        uint8
	dlm        uint8
	thrPending bool
	rx         []byte // pending bytes are rx[rxHead:]
	rxHead     int
	level      bool // the level last set on irq
	txb        [1]byte
	stats      UARTStats
}

var _ PortDevice = (*UART)(nil)

// NewUART returns a UART decoding ports base to base+7 that raises irq and
// sends the guest's output to out. out must not block (the vCPU thread calls
// it with the UART's mutex held) and must not call back into the UART; a nil
// out discards, a nil irq leaves the interrupt unconnected. The UART starts
// as firmware leaves one: 8N1 at 9600 baud (divisor 12), OUT2 set, FIFO off.
func NewUART(base uint16, irq IRQ, out io.Writer) *UART {
	if out == nil {
		out = io.Discard
	}
	return &UART{
		base: base,
		irq:  irq,
		out:  out,
		lcr:  0x03,
		mcr:  mcrOUT2,
		msr:  msrHostLines,
		dll:  12,
	}
}

// Base returns the first port the UART decodes.
func (u *UART) Base() uint16 { return u.base }

// offset checks an access and returns its first register offset.
func (u *UART) offset(port uint16, n int) (int, error) {
	off := int(port) - int(u.base)
	if n == 0 || off < 0 || off+n > UARTPorts {
		return 0, fmt.Errorf("devices: uart %#x: %d-byte access at port %#x: %w", u.base, n, port, ErrBadAccess)
	}
	return off, nil
}

// In implements PortDevice: each byte of data is a read of the register at
// port+i (how the ISA bus splits a wide access).
func (u *UART) In(port uint16, data []byte) error {
	off, err := u.offset(port, len(data))
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := range data {
		data[i] = u.read(off + i)
	}
	return u.updateIRQ()
}

// Out implements PortDevice: each byte of data is a write to the register
// at port+i.
func (u *UART) Out(port uint16, data []byte) error {
	off, err := u.offset(port, len(data))
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, v := range data {
		u.write(off+i, v)
	}
	return u.updateIRQ()
}

// Feed queues p for the guest to receive. It takes all of p or, returning
// an error wrapping ErrRXFull, none of it. Bytes queued before the guest
// resets its receive FIFO (as Linux does when it opens the port) are
// discarded then, as on hardware.
func (u *UART) Feed(p []byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if q := u.rxLen(); len(p) > UARTRXLimit-q {
		return fmt.Errorf("devices: uart %#x: feed %d bytes with %d queued: %w", u.base, len(p), q, ErrRXFull)
	}
	u.compactRX()
	u.rx = append(u.rx, p...)
	return u.updateIRQ()
}

// Stats returns the UART's counters.
func (u *UART) Stats() UARTStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stats
}

// State returns the UART's registers and pending receive bytes.
func (u *UART) State() UARTState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return UARTState{
		IER:         u.ier,
		FCR:         u.fcr,
		LCR:         u.lcr,
		MCR:         u.mcr,
		LSR:         u.lsr,
		MSR:         u.msr,
		SCR:         u.scr,
		DLL:         u.dll,
		DLM:         u.dlm,
		THREPending: u.thrPending,
		RX:          append([]byte(nil), u.rx[u.rxHead:]...),
	}
}

// SetState replaces the UART's registers and pending receive bytes with s
// (which it copies) and drives the interrupt line to the level s implies,
// whatever the level was. Counters are not part of the state.
func (u *UART) SetState(s UARTState) error {
	switch {
	case s.IER&^ierMask != 0, s.FCR&^fcrKept != 0, s.MCR&^mcrMask != 0, s.LSR&^lsrSticky != 0:
		return fmt.Errorf("devices: uart %#x: set state: reserved register bits set: %w", u.base, ErrBadState)
	case s.THREPending && s.IER&ierTHRI == 0:
		return fmt.Errorf("devices: uart %#x: set state: THRE pending with the interrupt disabled: %w", u.base, ErrBadState)
	case len(s.RX) > UARTRXLimit:
		return fmt.Errorf("devices: uart %#x: set state: %d receive bytes: %w", u.base, len(s.RX), ErrBadState)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ier, u.fcr, u.lcr, u.mcr, u.lsr, u.msr = s.IER, s.FCR, s.LCR, s.MCR, s.LSR, s.MSR
	u.scr, u.dll, u.dlm = s.SCR, s.DLL, s.DLM
	u.thrPending = s.THREPending
	u.rx = append(u.rx[:0], s.RX...)
	u.rxHead = 0
	want := u.wantLevel()
	if u.irq != nil {
		if err := u.irq.SetLevel(want); err != nil {
			u.level = !want // unknown: make the next update set it again
			return fmt.Errorf("devices: uart %#x: set state: set irq level %v: %w", u.base, want, err)
		}
	}
	u.level = want
	return nil
}

func (u *UART) rxLen() int { return len(u.rx) - u.rxHead }

// compactRX moves the pending bytes to the front once the consumed prefix
// dominates, so the queue's memory stays bounded.
func (u *UART) compactRX() {
	if u.rxHead == 0 {
		return
	}
	if u.rxHead == len(u.rx) {
		u.rx, u.rxHead = u.rx[:0], 0
		return
	}
	if u.rxHead >= 4096 && u.rxHead >= len(u.rx)/2 {
		n := copy(u.rx, u.rx[u.rxHead:])
		u.rx, u.rxHead = u.rx[:n], 0
	}
}

func (u *UART) read(off int) uint8 {
	dlab := u.lcr&lcrDLAB != 0
	switch off {
	case uartRBR:
		if dlab {
			return u.dll
		}
		if u.rxLen() == 0 {
			return 0
		}
		v := u.rx[u.rxHead]
		u.rxHead++
		u.compactRX()
		u.stats.RXBytes++
		return v
	case uartIER:
		if dlab {
			return u.dlm
		}
		return u.ier
	case uartIIR:
		id := u.interruptID()
		if id == iirTHRI {
			u.thrPending = false // reading IIR acknowledges THRE
		}
		if u.fcr&fcrEnable != 0 {
			id |= iirFIFOOn
		}
		return id
	case uartLCR:
		return u.lcr
	case uartMCR:
		return u.mcr
	case uartLSR:
		v := u.lsr | lsrTHRE | lsrTEMT
		if u.rxLen() > 0 {
			v |= lsrDR
		}
		u.lsr = 0
		return v
	case uartMSR:
		v := u.msr
		u.msr &^= msrDelta
		return v
	default: // uartSCR
		return u.scr
	}
}

func (u *UART) write(off int, v uint8) {
	dlab := u.lcr&lcrDLAB != 0
	switch off {
	case uartRBR:
		if dlab {
			u.dll = v
			return
		}
		u.transmit(v)
	case uartIER:
		if dlab {
			u.dlm = v
			return
		}
		v &= ierMask
		if (v^u.ier)&ierTHRI != 0 {
			// The THR is always empty, so enabling THRI raises the
			// interrupt at once (on the rising edge, as QEMU and Bochs
			// do and as Linux's THRE test expects); disabling drops it.
			u.thrPending = v&ierTHRI != 0
		}
		u.ier = v
	case uartIIR: // FCR
		if v&fcrEnable == 0 {
			u.fcr = 0 // other bits are not programmed without bit 0
			return
		}
		if v&fcrClearRX != 0 {
			u.stats.RXDiscarded += uint64(u.rxLen())
			u.rx, u.rxHead = u.rx[:0], 0
		}
		u.fcr = v & fcrKept
	case uartLCR:
		u.lcr = v
	case uartMCR:
		u.mcr = v & mcrMask
		u.setModemLines(u.modemLines())
	case uartSCR:
		u.scr = v
	}
	// LSR and MSR writes (factory test) are ignored.
}

// transmit sends v: out, or the receive queue in loopback. Either way the
// THR is empty again at once, so a THRE interrupt, cleared by the write,
// rearms immediately if enabled.
func (u *UART) transmit(v uint8) {
	if u.mcr&mcrLoop != 0 {
		limit := 1
		if u.fcr&fcrEnable != 0 {
			limit = uartFIFOSize
		}
		if u.rxLen() >= limit {
			u.lsr |= lsrOE
		} else {
			u.compactRX()
			u.rx = append(u.rx, v)
		}
	} else {
		u.txb[0] = v
		if n, err := u.out.Write(u.txb[:]); err != nil || n != 1 {
			u.stats.Dropped++
		} else {
			u.stats.TXBytes++
		}
	}
	u.thrPending = u.ier&ierTHRI != 0
}

// modemLines returns the modem input lines (MSR high nibble): the host's
// fixed lines, or in loopback the MCR outputs wired back.
func (u *UART) modemLines() uint8 {
	if u.mcr&mcrLoop == 0 {
		return msrHostLines
	}
	var l uint8
	if u.mcr&mcrDTR != 0 {
		l |= msrDSR
	}
	if u.mcr&mcrRTS != 0 {
		l |= msrCTS
	}
	if u.mcr&mcrOUT1 != 0 {
		l |= msrRI
	}
	if u.mcr&mcrOUT2 != 0 {
		l |= msrDCD
	}
	return l
}

// setModemLines sets the MSR's lines and accumulates the delta bits.
func (u *UART) setModemLines(lines uint8) {
	old := u.msr &^ msrDelta
	changed := old ^ lines
	delta := u.msr & msrDelta
	if changed&msrCTS != 0 {
		delta |= msrDCTS
	}
	if changed&msrDSR != 0 {
		delta |= msrDDSR
	}
	if old&msrRI != 0 && lines&msrRI == 0 {
		delta |= msrTERI
	}
	if changed&msrDCD != 0 {
		delta |= msrDDCD
	}
	u.msr = lines | delta
}

// interruptID returns the highest-priority pending interrupt's IIR code.
func (u *UART) interruptID() uint8 {
	switch {
	case u.ier&ierRLSI != 0 && u.lsr&lsrErrors != 0:
		return iirRLSI
	case u.ier&ierRDI != 0 && u.rxLen() > 0:
		return iirRDI
	case u.ier&ierTHRI != 0 && u.thrPending:
		return iirTHRI
	case u.ier&ierMSI != 0 && u.msr&msrDelta != 0:
		return iirMSI
	}
	return iirNoInt
}

// wantLevel is the IRQ line's level: an interrupt pending, passed through
// by OUT2 (the PC gate) and not cut off by loopback.
func (u *UART) wantLevel() bool {
	return u.interruptID() != iirNoInt && u.mcr&mcrOUT2 != 0 && u.mcr&mcrLoop == 0
}

// updateIRQ sets the line if its level changed. On error the recorded level
// stays, so the next update tries again.
func (u *UART) updateIRQ() error {
	want := u.wantLevel()
	if want == u.level {
		return nil
	}
	if u.irq != nil {
		if err := u.irq.SetLevel(want); err != nil {
			return fmt.Errorf("devices: uart %#x: set irq level %v: %w", u.base, want, err)
		}
	}
	u.level = want
	return nil
}

// IRQLevel is the level the UART last set on its interrupt line.
func (u *UART) IRQLevel() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.level
}
