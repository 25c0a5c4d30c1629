package devices

import (
	"fmt"
	"sync"
	"time"
)

// CMOS RTC ports: index (0x70, bit 7 = NMI disable) and data (0x71).
const (
	RTCIndexPort = 0x70
	RTCDataPort  = 0x71
	RTCPorts     = 2
	// rtcRAM is the CMOS size: 14 clock registers and 114 bytes of RAM.
	rtcRAM = 128
)

// RTC is a minimal MC146818 CMOS clock: it reads the host's clock (UTC,
// BCD, 24-hour) with update-in-progress always clear, so a booting kernel
// gets a wall-clock time and never waits on UIP; it never interrupts.
// Writes to the clock registers are ignored (the guest's clock is set
// through the agent); the CMOS RAM bytes (0x0e-0x7f) keep what the guest
// writes. It is safe for concurrent use.
type RTC struct {
	now func() time.Time

	mu    sync.Mutex
	index uint8
	ram   [rtcRAM]byte
}

// RTCState is the RTC's checkpointed state.
type RTCState struct {
	Index uint8
	RAM   [rtcRAM]byte
}

// NewRTC returns an RTC reading now (nil: time.Now).
func NewRTC(now func() time.Time) *RTC {
	if now == nil {
		now = time.Now
	}
	return &RTC{now: now}
}

func bcd(v int) byte { return byte(v/10<<4 | v%10) }

// In implements PortDevice.
func (r *RTC) In(port uint16, data []byte) error {
	if len(data) != 1 {
		return fmt.Errorf("%w: RTC port %#x: %d-byte access", ErrBadAccess, port, len(data))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch port {
	case RTCIndexPort:
		data[0] = 0xff // write-only on a PC
	case RTCDataPort:
		data[0] = r.read(r.index)
	default:
		return fmt.Errorf("%w: RTC has no port %#x", ErrBadAccess, port)
	}
	return nil
}

func (r *RTC) read(reg uint8) byte {
	t := r.now().UTC()
	switch reg {
	case 0x00:
		return bcd(t.Second())
	case 0x02:
		return bcd(t.Minute())
	case 0x04:
		return bcd(t.Hour())
	case 0x06:
		return bcd(int(t.Weekday()) + 1)
	case 0x07:
		return bcd(t.Day())
	case 0x08:
		return bcd(int(t.Month()))
	case 0x09:
		return bcd(t.Year() % 100)
	case 0x32: // century, where PCs keep it
		return bcd(t.Year() / 100)
	case 0x01, 0x03, 0x05: // alarms
		return 0
	case 0x0a: // status A: 32.768 kHz time base, 1024 Hz rate, UIP clear
		return 0x26
	case 0x0b: // status B: 24-hour, BCD, no interrupts
		return 0x02
	case 0x0c: // status C: no interrupt flags
		return 0
	case 0x0d: // status D: valid RAM and time
		return 0x80
	}
	return r.ram[reg]
}

// Out implements PortDevice.
func (r *RTC) Out(port uint16, data []byte) error {
	if len(data) != 1 {
		return fmt.Errorf("%w: RTC port %#x: %d-byte access", ErrBadAccess, port, len(data))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch port {
	case RTCIndexPort:
		r.index = data[0] & 0x7f
	case RTCDataPort:
		if r.index >= 0x0e && r.index != 0x32 {
			r.ram[r.index] = data[0]
		}
	default:
		return fmt.Errorf("%w: RTC has no port %#x", ErrBadAccess, port)
	}
	return nil
}

// State returns the RTC's state for a checkpoint.
func (r *RTC) State() RTCState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RTCState{Index: r.index, RAM: r.ram}
}

// SetState puts back a checkpointed state.
func (r *RTC) SetState(s RTCState) error {
	if s.Index >= rtcRAM {
		return fmt.Errorf("%w: RTC index %#x", ErrBadState, s.Index)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.index, r.ram = s.Index, s.RAM
	return nil
}
