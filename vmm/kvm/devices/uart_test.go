package devices

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// uartIO does byte-wide port I/O on a UART as the 8250 driver does.
type uartIO struct {
	t testing.TB
	u *UART
}

func (p uartIO) in(off int) uint8 {
	p.t.Helper()
	var b [1]byte
	if err := p.u.In(p.u.Base()+uint16(off), b[:]); err != nil {
		p.t.Fatalf("in %d: %v", off, err)
	}
	return b[0]
}

func (p uartIO) out(off int, v uint8) {
	p.t.Helper()
	if err := p.u.Out(p.u.Base()+uint16(off), []byte{v}); err != nil {
		p.t.Fatalf("out %d, %#x: %v", off, v, err)
	}
}

// linuxAutoconfig replays drivers/tty/serial/8250/8250_port.c autoconfig()
// (with the 16550A variant probes and, unless skipTest, the loopback test)
// and returns the port type it decides.
func linuxAutoconfig(p uartIO, skipTest bool) string {
	scratch := p.in(uartIER)
	p.out(uartIER, 0)
	scratch2 := p.in(uartIER) & 0x0f
	p.out(uartIER, 0x0f)
	scratch3 := p.in(uartIER) & 0x0f
	p.out(uartIER, scratch)
	if scratch2 != 0 || scratch3 != 0x0f {
		return "none (IER test)"
	}
	saveMCR, saveLCR := p.in(uartMCR), p.in(uartLCR)
	if !skipTest {
		p.out(uartMCR, mcrLoop|0x0a)
		status1 := p.in(uartMSR) & 0xf0
		p.out(uartMCR, saveMCR)
		if status1 != 0x90 {
			return "none (loopback test)"
		}
	}
	p.out(uartLCR, 0xbf) // UART_LCR_CONF_MODE_B
	p.out(2, 0)          // EFR
	p.out(uartLCR, 0)
	p.out(uartIIR, fcrEnable)
	var typ string
	switch p.in(uartIIR) >> 6 {
	case 0:
		typ = "8250"
	case 1:
		typ = "unknown"
	case 2:
		typ = "16550"
	case 3:
		typ = autoconfig16550A(p)
	}
	p.out(uartLCR, saveLCR)
	p.out(uartMCR, saveMCR)
	p.out(uartIIR, fcrEnable) // serial8250_clear_fifos
	p.out(uartIIR, fcrEnable|fcrClearRX|0x04)
	p.out(uartIIR, 0)
	p.in(uartRBR)
	p.out(uartIER, 0)
	return typ
}

func autoconfig16550A(p uartIO) string {
	p.out(uartLCR, 0x80) // UART_LCR_CONF_MODE_A
	if p.in(2) == 0 {
		return "16650 (EFRv1)"
	}
	p.out(uartLCR, 0xbf)
	if p.in(2) == 0 {
		return "EFRv2"
	}
	p.out(uartLCR, 0)
	status1 := p.in(uartMCR)
	p.out(uartLCR, 0xe0)
	status2 := p.in(2) // EXCR1
	if (status2^status1)&mcrLoop == 0 {
		p.out(uartLCR, 0)
		p.out(uartMCR, status1^mcrLoop)
		p.out(uartLCR, 0xe0)
		status2 = p.in(2)
		p.out(uartLCR, 0)
		p.out(uartMCR, status1)
		if (status2^status1)&mcrLoop != 0 {
			return "NS16550A"
		}
	}
	p.out(uartLCR, 0)
	p.out(uartIIR, fcrEnable|0x20) // UART_FCR7_64BYTE
	status1 = p.in(uartIIR) >> 5
	p.out(uartIIR, fcrEnable)
	p.out(uartLCR, 0x80)
	p.out(uartIIR, fcrEnable|0x20)
	status2 = p.in(uartIIR) >> 5
	p.out(uartIIR, fcrEnable)
	p.out(uartLCR, 0)
	if status1 == 6 && status2 == 7 {
		return "16750"
	}
	iersave := p.in(uartIER)
	p.out(uartIER, iersave&^0x40)
	if p.in(uartIER)&0x40 == 0 {
		p.out(uartIER, iersave|0x40)
		if p.in(uartIER)&0x40 != 0 {
			return "XScale"
		}
	}
	p.out(uartIER, iersave)
	if n := sizeFIFO(p); n == 64 {
		return "U6_16550A"
	} else if n != uartFIFOSize {
		p.t.Errorf("size_fifo = %d, want %d", n, uartFIFOSize)
	}
	return "16550A"
}

// sizeFIFO replays size_fifo(): loopback, 256 bytes out, count what comes back.
func sizeFIFO(p uartIO) int {
	oldLCR := p.in(uartLCR)
	p.out(uartLCR, 0)
	oldFCR := p.in(uartIIR)
	oldMCR := p.in(uartMCR)
	p.out(uartIIR, fcrEnable|fcrClearRX|0x04)
	p.out(uartMCR, mcrLoop)
	p.out(uartLCR, 0x80)
	oldDL := uint16(p.in(0)) | uint16(p.in(1))<<8
	p.out(0, 1)
	p.out(1, 0)
	p.out(uartLCR, 0x03)
	for c := range 256 {
		p.out(uartRBR, uint8(c))
	}
	count := 0
	for ; p.in(uartLSR)&lsrDR != 0 && count < 256; count++ {
		p.in(uartRBR)
	}
	p.out(uartIIR, oldFCR)
	p.out(uartMCR, oldMCR)
	p.out(uartLCR, 0x80)
	p.out(0, uint8(oldDL))
	p.out(1, uint8(oldDL>>8))
	p.out(uartLCR, oldLCR)
	return count
}

// linuxTHRETest replays the UART_BUG_THRE and UART_BUG_TXEN tests of
// serial8250_do_startup and reports whether the driver would mark the port
// buggy.
func linuxTHRETest(p uartIO) (buggy bool) {
	p.out(uartIER, ierTHRI)
	iir1 := p.in(uartIIR)
	p.out(uartIER, 0)
	p.out(uartIER, ierTHRI)
	iir := p.in(uartIIR)
	p.out(uartIER, 0)
	if iir1&iirNoInt == 0 && iir&iirNoInt != 0 {
		return true // UART_BUG_THRE
	}
	p.out(uartMCR, mcrDTR|mcrRTS|mcrOUT2) // set_mctrl, then the TXEN test
	p.out(uartIER, ierTHRI)
	lsr := p.in(uartLSR)
	iir = p.in(uartIIR)
	p.out(uartIER, 0)
	return lsr&lsrTEMT != 0 && iir&iirNoInt != 0 // UART_BUG_TXEN
}

func TestUARTLinuxProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		base     uint16
		skipTest bool
		setup    func(p uartIO, u *UART)
	}{
		{name: "COM1 power-on", base: COM1Port},
		{name: "COM2 power-on, loopback test skipped", base: COM2Port, skipTest: true},
		{name: "after use", base: COM1Port, setup: func(p uartIO, u *UART) {
			p.out(uartIIR, fcrEnable|0x80)
			p.out(uartIER, ierRDI|ierTHRI|ierMSI)
			p.out(uartMCR, mcrDTR|mcrRTS|mcrOUT2)
			if err := u.Feed([]byte("pending")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "DLAB left set", base: COM2Port, setup: func(p uartIO, _ *UART) { p.out(uartLCR, 0x83) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			irq := &fakeIRQ{}
			u := NewUART(tt.base, irq, &out)
			p := uartIO{t, u}
			if tt.setup != nil {
				tt.setup(p, u)
			}
			if got, want := linuxAutoconfig(p, tt.skipTest), "16550A"; got != want {
				t.Errorf("autoconfig detects %q, want %q", got, want)
			}
			p.out(uartLCR, 0x03) // set_termios has run since (8N1, DLAB clear)
			if linuxTHRETest(p) {
				t.Errorf("THRE test marks the port UART_BUG_THRE")
			}
			if out.Len() != 0 {
				t.Errorf("probe transmitted %q", out.Bytes())
			}
			// Scratch register, as autoconfig_8250 tests it.
			for _, v := range []uint8{0xa5, 0x5a} {
				p.out(uartSCR, v)
				if got := p.in(uartSCR); got != v {
					t.Errorf("SCR = %#x, want %#x", got, v)
				}
			}
			if p.in(uartIIR) != iirFIFOOn|iirNoInt && p.in(uartIIR) != iirNoInt {
				t.Errorf("interrupt pending after the probe")
			}
			if irq.level() {
				t.Errorf("IRQ high after the probe")
			}
			irq.checkTransitions(t)
		})
	}
}

func TestUARTLoopbackMSR(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mcr  uint8
		want uint8 // MSR high nibble
	}{
		{mcrLoop, 0},
		{mcrLoop | mcrDTR, msrDSR},
		{mcrLoop | mcrRTS, msrCTS},
		{mcrLoop | mcrOUT1, msrRI},
		{mcrLoop | mcrOUT2, msrDCD},
		{mcrLoop | 0x0a, 0x90}, // Linux's loopback test
		{mcrLoop | 0x0f, 0xf0},
		{mcrOUT2, msrHostLines}, // not loopback: the host's lines
	}
	for _, tt := range tests {
		u := NewUART(COM1Port, nil, nil)
		p := uartIO{t, u}
		p.out(uartMCR, tt.mcr)
		if got := p.in(uartMSR) & 0xf0; got != tt.want {
			t.Errorf("MCR %#x: MSR lines %#x, want %#x", tt.mcr, got, tt.want)
		}
		if got := p.in(uartMCR); got != tt.mcr {
			t.Errorf("MCR reads %#x, want %#x", got, tt.mcr)
		}
	}
}

func TestUARTModemStatusInterrupt(t *testing.T) {
	t.Parallel()
	irq := &fakeIRQ{}
	u := NewUART(COM1Port, irq, nil)
	p := uartIO{t, u}
	p.out(uartIER, ierMSI)
	p.out(uartMCR, mcrOUT2|mcrLoop|mcrRTS) // DSR 1->0
	if got, want := p.in(uartIIR), uint8(iirMSI); got != want {
		t.Fatalf("IIR = %#x, want %#x", got, want)
	}
	if irq.level() {
		t.Errorf("IRQ high in loopback (the OUT2 gate is open only outside loopback)")
	}
	p.out(uartMCR, mcrLoop|mcrOUT1) // CTS 1->0, RI 0->1, DCD 1->0
	p.out(uartMCR, mcrOUT2)         // host lines: RI falls (TERI)
	msr := p.in(uartMSR)
	if msr&msrDelta != msrDCTS|msrDDSR|msrTERI|msrDDCD {
		t.Errorf("MSR = %#x, want all four delta bits", msr)
	}
	if got := p.in(uartMSR) & msrDelta; got != 0 {
		t.Errorf("delta bits %#x survive an MSR read", got)
	}
	if got := p.in(uartIIR); got != iirNoInt {
		t.Errorf("IIR = %#x after MSR read, want no interrupt", got)
	}
	irq.checkTransitions(t)
}

func TestUARTTransmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		failWriter  bool
		loop        bool
		wantOut     string
		wantStats   UARTStats
		wantLooped  string
		writeString string
	}{
		{name: "to out", writeString: "hello\n", wantOut: "hello\n", wantStats: UARTStats{TXBytes: 6}},
		{name: "writer fails", failWriter: true, writeString: "abc", wantStats: UARTStats{Dropped: 3}},
		{name: "loopback", writeString: "xyz", loop: true, wantLooped: "xyz", wantStats: UARTStats{RXBytes: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			var u *UART
			if tt.failWriter {
				u = NewUART(COM1Port, nil, errWriter{})
			} else {
				u = NewUART(COM1Port, nil, &out)
			}
			p := uartIO{t, u}
			if tt.loop {
				p.out(uartMCR, mcrLoop)
				p.out(uartIIR, fcrEnable)
			}
			for _, c := range []byte(tt.writeString) {
				if lsr := p.in(uartLSR); lsr&(lsrTHRE|lsrTEMT) != lsrTHRE|lsrTEMT {
					t.Fatalf("LSR = %#x: transmitter not empty", lsr)
				}
				p.out(uartRBR, c)
			}
			var looped []byte
			for p.in(uartLSR)&lsrDR != 0 {
				looped = append(looped, p.in(uartRBR))
			}
			if got := out.String(); got != tt.wantOut {
				t.Errorf("out = %q, want %q", got, tt.wantOut)
			}
			if got := string(looped); got != tt.wantLooped {
				t.Errorf("looped back %q, want %q", got, tt.wantLooped)
			}
			if diff := cmp.Diff(tt.wantStats, u.Stats()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUARTLoopbackOverrun(t *testing.T) {
	t.Parallel()
	irq := &fakeIRQ{}
	u := NewUART(COM1Port, irq, nil)
	p := uartIO{t, u}
	p.out(uartIIR, fcrEnable)
	p.out(uartIER, ierRLSI)
	p.out(uartMCR, mcrLoop|mcrOUT2)
	for i := range uartFIFOSize + 1 {
		p.out(uartRBR, uint8(i))
	}
	if got, want := p.in(uartIIR), uint8(iirFIFOOn|iirRLSI); got != want {
		t.Errorf("IIR = %#x, want %#x (line status)", got, want)
	}
	if got := p.in(uartLSR); got&(lsrOE|lsrDR) != lsrOE|lsrDR {
		t.Errorf("LSR = %#x, want OE and DR", got)
	}
	if got := p.in(uartLSR); got&lsrOE != 0 {
		t.Errorf("OE survives an LSR read")
	}
	if got, want := p.in(uartIIR), uint8(iirFIFOOn|iirNoInt); got != want {
		t.Errorf("IIR = %#x after LSR read, want %#x", got, want)
	}
}

// uartRXStep is one step of a receive test: feed data to the UART, or an
// IN (checking the value) or OUT at register off.
type uartRXStep struct {
	op   string // "feed", "in", "out"
	off  int
	val  uint8 // out value, or expected in value
	data string
}

// uartReceiveCase is one TestUARTReceive case.
type uartReceiveCase struct {
	name      string
	steps     []uartRXStep
	wantIRQ   []bool
	wantStats UARTStats
}

// uartReceiveCases are TestUARTReceive's cases.
func uartReceiveCases() []uartReceiveCase {
	return []uartReceiveCase{
		{
			name: "interrupt-driven with FIFO",
			steps: []uartRXStep{
				{op: "out", off: uartIIR, val: fcrEnable | 0x80},
				{op: "out", off: uartIER, val: ierRDI | ierRLSI},
				{op: "in", off: uartIIR, val: iirFIFOOn | iirNoInt},
				{op: "feed", data: "ab"},
				{op: "in", off: uartIIR, val: iirFIFOOn | iirRDI},
				{op: "in", off: uartLSR, val: lsrDR | lsrTHRE | lsrTEMT},
				{op: "in", off: uartRBR, val: 'a'},
				{op: "in", off: uartIIR, val: iirFIFOOn | iirRDI},
				{op: "in", off: uartRBR, val: 'b'},
				{op: "in", off: uartLSR, val: lsrTHRE | lsrTEMT},
				{op: "in", off: uartIIR, val: iirFIFOOn | iirNoInt},
				{op: "in", off: uartRBR, val: 0}, // empty
			},
			wantIRQ:   []bool{true, false},
			wantStats: UARTStats{RXBytes: 2},
		},
		{
			name: "polled, no FIFO",
			steps: []uartRXStep{
				{op: "feed", data: "z"},
				{op: "in", off: uartIIR, val: iirNoInt},
				{op: "in", off: uartLSR, val: lsrDR | lsrTHRE | lsrTEMT},
				{op: "in", off: uartRBR, val: 'z'},
			},
			wantStats: UARTStats{RXBytes: 1},
		},
		{
			name: "OUT2 gates the line",
			steps: []uartRXStep{
				{op: "out", off: uartMCR, val: 0},
				{op: "out", off: uartIER, val: ierRDI},
				{op: "feed", data: "q"},
				{op: "in", off: uartIIR, val: iirRDI},
				{op: "out", off: uartMCR, val: mcrOUT2},
				{op: "out", off: uartMCR, val: 0},
			},
			wantIRQ: []bool{true, false},
		},
		{
			name: "FIFO reset discards",
			steps: []uartRXStep{
				{op: "out", off: uartIER, val: ierRDI},
				{op: "feed", data: "abc"},
				{op: "out", off: uartIIR, val: fcrEnable | fcrClearRX},
				{op: "in", off: uartLSR, val: lsrTHRE | lsrTEMT},
				{op: "feed", data: "d"},
				{op: "in", off: uartRBR, val: 'd'},
			},
			wantIRQ:   []bool{true, false, true, false},
			wantStats: UARTStats{RXBytes: 1, RXDiscarded: 3},
		},
		{
			name: "divisor latch hides RBR",
			steps: []uartRXStep{
				{op: "feed", data: "x"},
				{op: "out", off: uartLCR, val: lcrDLAB | 3},
				{op: "in", off: uartRBR, val: 12},
				{op: "in", off: uartIER, val: 0},
				{op: "out", off: uartRBR, val: 1},
				{op: "in", off: uartRBR, val: 1},
				{op: "out", off: uartLCR, val: 3},
				{op: "in", off: uartRBR, val: 'x'},
			},
			wantStats: UARTStats{RXBytes: 1},
		},
	}
}

func TestUARTReceive(t *testing.T) {
	t.Parallel()
	tests := uartReceiveCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			irq := &fakeIRQ{}
			u := NewUART(COM2Port, irq, nil)
			p := uartIO{t, u}
			for i, s := range tt.steps {
				switch s.op {
				case "feed":
					if err := u.Feed([]byte(s.data)); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				case "out":
					p.out(s.off, s.val)
				case "in":
					if got := p.in(s.off); got != s.val {
						t.Fatalf("step %d: in %d = %#x, want %#x", i, s.off, got, s.val)
					}
				}
			}
			if diff := cmp.Diff(tt.wantIRQ, irq.history()); diff != "" {
				t.Errorf("IRQ levels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStats, u.Stats()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUARTTHRE(t *testing.T) {
	t.Parallel()
	type step struct {
		op  string // "out", "iir"
		off int
		val uint8
		// after the step:
		wantIIR uint8 // checked for "iir" steps
		high    bool  // IRQ level
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "enable raises, IIR read clears",
			steps: []step{
				{op: "out", off: uartIER, val: ierTHRI, high: true},
				{op: "iir", wantIIR: iirTHRI, high: false},
				{op: "iir", wantIIR: iirNoInt, high: false},
			},
		},
		{
			name: "re-enable raises again",
			steps: []step{
				{op: "out", off: uartIER, val: ierTHRI, high: true},
				{op: "iir", wantIIR: iirTHRI},
				{op: "out", off: uartIER, val: 0},
				{op: "out", off: uartIER, val: ierTHRI, high: true},
				{op: "out", off: uartIER, val: ierTHRI | ierRDI, high: true}, // not an edge: stays
				{op: "iir", wantIIR: iirTHRI},
				{op: "out", off: uartIER, val: ierTHRI | ierRDI}, // THRI unchanged: no re-arm
				{op: "iir", wantIIR: iirNoInt},
			},
		},
		{
			name: "THR write rearms when enabled",
			steps: []step{
				{op: "out", off: uartIER, val: ierTHRI, high: true},
				{op: "iir", wantIIR: iirTHRI},
				{op: "out", off: uartRBR, val: 'x', high: true},
				{op: "out", off: uartRBR, val: 'y', high: true},
				{op: "out", off: uartIER, val: 0},
				{op: "out", off: uartRBR, val: 'z'},
				{op: "iir", wantIIR: iirNoInt},
			},
		},
		{
			name: "RX data outranks THRE",
			steps: []step{
				{op: "out", off: uartIER, val: ierTHRI | ierRDI, high: true},
				{op: "feed", high: true},
				{op: "iir", wantIIR: iirRDI, high: true}, // THRE still pending
				{op: "in", off: uartRBR, high: true},
				{op: "iir", wantIIR: iirTHRI},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			irq := &fakeIRQ{}
			var out bytes.Buffer
			u := NewUART(COM1Port, irq, &out)
			p := uartIO{t, u}
			for i, s := range tt.steps {
				switch s.op {
				case "out":
					p.out(s.off, s.val)
				case "in":
					p.in(s.off)
				case "feed":
					if err := u.Feed([]byte{1}); err != nil {
						t.Fatal(err)
					}
				case "iir":
					if got := p.in(uartIIR); got != s.wantIIR {
						t.Fatalf("step %d: IIR = %#x, want %#x", i, got, s.wantIIR)
					}
				}
				if got := irq.level(); got != s.high {
					t.Fatalf("step %d (%s %d %#x): IRQ %v, want %v", i, s.op, s.off, s.val, got, s.high)
				}
			}
			irq.checkTransitions(t)
		})
	}
}

func TestUARTFeedFull(t *testing.T) {
	t.Parallel()
	u := NewUART(COM2Port, nil, nil)
	if err := u.Feed(make([]byte, UARTRXLimit-1)); err != nil {
		t.Fatal(err)
	}
	if err := u.Feed([]byte{1, 2}); !errors.Is(err, ErrRXFull) {
		t.Fatalf("Feed past the limit: %v, want ErrRXFull", err)
	}
	if err := u.Feed([]byte{1}); err != nil {
		t.Fatalf("Feed up to the limit: %v", err)
	}
	p := uartIO{t, u}
	p.in(uartRBR)
	if err := u.Feed([]byte{3}); err != nil {
		t.Fatalf("Feed after a read: %v", err)
	}
	if got := len(u.State().RX); got != UARTRXLimit {
		t.Errorf("%d bytes queued, want %d", got, UARTRXLimit)
	}
}

func TestUARTBadAccess(t *testing.T) {
	t.Parallel()
	u := NewUART(COM1Port, nil, nil)
	tests := []struct {
		port uint16
		n    int
		ok   bool
	}{
		{COM1Port, 1, true},
		{COM1Port + 7, 1, true},
		{COM1Port + 6, 2, true},
		{COM1Port + 7, 2, false},
		{COM1Port + 8, 1, false},
		{COM1Port - 1, 1, false},
		{COM1Port, 0, false},
	}
	for _, tt := range tests {
		data := make([]byte, tt.n)
		for _, err := range []error{u.In(tt.port, data), u.Out(tt.port, data)} {
			if got := err == nil; got != tt.ok || (!tt.ok && !errors.Is(err, ErrBadAccess)) {
				t.Errorf("%d bytes at %#x: %v, want ok=%v", tt.n, tt.port, err, tt.ok)
			}
		}
	}
}

func TestUARTIRQError(t *testing.T) {
	t.Parallel()
	irq := &fakeIRQ{err: errors.New("KVM_IRQ_LINE: EINVAL")}
	u := NewUART(COM1Port, irq, nil)
	err := u.Out(COM1Port+uartIER, []byte{ierTHRI})
	if err == nil {
		t.Fatal("SetLevel's error was not returned")
	}
	// The next access retries.
	if err := u.In(COM1Port+uartLSR, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true}, irq.history()); diff != "" {
		t.Errorf("IRQ levels (-want +got):\n%s", diff)
	}
}

func TestUARTState(t *testing.T) {
	t.Parallel()
	irq := &fakeIRQ{}
	var out bytes.Buffer
	u := NewUART(COM2Port, irq, &out)
	p := uartIO{t, u}
	p.out(uartIIR, fcrEnable|0x40)
	p.out(uartIER, ierRDI|ierTHRI)
	p.out(uartSCR, 0x42)
	p.out(uartLCR, lcrDLAB|3)
	p.out(uartRBR, 1)
	p.out(uartIER, 0)
	p.out(uartLCR, 3)
	msg := "hello, agent"
	if err := u.Feed([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if got := p.in(uartRBR); got != msg[i] {
			t.Fatalf("byte %d = %q", i, got)
		}
	}
	saved := u.State()
	want := UARTState{IER: ierRDI | ierTHRI, FCR: fcrEnable | 0x40, LCR: 3, MCR: mcrOUT2, MSR: msrHostLines,
		SCR: 0x42, DLL: 1, THREPending: true, RX: []byte(msg[5:])}
	if diff := cmp.Diff(want, saved); diff != "" {
		t.Fatalf("State (-want +got):\n%s", diff)
	}

	// The original runs on: read the rest.
	var rest []byte
	for p.in(uartLSR)&lsrDR != 0 {
		rest = append(rest, p.in(uartRBR))
	}

	// A fresh UART restored from the checkpoint replays the same.
	irq2 := &fakeIRQ{}
	u2 := NewUART(COM2Port, irq2, nil)
	if err := u2.SetState(saved); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true}, irq2.history()); diff != "" {
		t.Errorf("SetState IRQ levels (-want +got):\n%s", diff)
	}
	saved.RX[0] = 'X' // SetState copied
	if diff := cmp.Diff(want, u2.State()); diff != "" {
		t.Errorf("State after SetState (-want +got):\n%s", diff)
	}
	p2 := uartIO{t, u2}
	if got, want := p2.in(uartIIR), uint8(iirFIFOOn|iirRDI); got != want {
		t.Errorf("restored IIR = %#x, want %#x", got, want)
	}
	var rest2 []byte
	for p2.in(uartLSR)&lsrDR != 0 {
		rest2 = append(rest2, p2.in(uartRBR))
	}
	if !bytes.Equal(rest, rest2) || string(rest) != msg[5:] {
		t.Errorf("after restore read %q, original read %q, want %q", rest2, rest, msg[5:])
	}

	bad := []UARTState{
		{IER: 0x10},
		{MCR: 0x20},
		{FCR: 0x02},
		{LSR: lsrDR},
		{THREPending: true},
		{RX: make([]byte, UARTRXLimit+1)},
	}
	for _, s := range bad {
		if err := u2.SetState(s); !errors.Is(err, ErrBadState) {
			t.Errorf("SetState(%+v): %v, want ErrBadState", s, err)
		}
	}
}

// TestUARTConcurrentFeed feeds from a host goroutine while the "vCPU" reads,
// for the race detector, and checks the bytes arrive in order.
func TestUARTConcurrentFeed(t *testing.T) {
	t.Parallel()
	irq := &fakeIRQ{}
	u := NewUART(COM2Port, irq, nil)
	p := uartIO{t, u}
	p.out(uartIER, ierRDI)
	const n = 20000
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i += 100 {
			chunk := make([]byte, 100)
			for j := range chunk {
				chunk[j] = byte(i + j)
			}
			if err := u.Feed(chunk); err != nil {
				done <- err
				return
			}
			_ = u.State()
			_ = u.Stats()
		}
		done <- nil
	}()
	got := 0
	for got < n {
		if p.in(uartLSR)&lsrDR == 0 {
			continue
		}
		if b := p.in(uartRBR); b != byte(got) {
			t.Fatalf("byte %d = %d, want %d", got, b, byte(got))
		}
		got++
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := u.Stats(); s.RXBytes != n {
		t.Errorf("RXBytes = %d, want %d", s.RXBytes, n)
	}
	irq.checkTransitions(t)
}
