package devices

import (
	"errors"
	"testing"
	"time"
)

func TestRTC(t *testing.T) {
	now := time.Date(2038, time.January, 19, 3, 14, 8, 0, time.UTC)
	r := NewRTC(func() time.Time { return now })
	read := func(reg byte) byte {
		t.Helper()
		if err := r.Out(RTCIndexPort, []byte{reg | 0x80}); err != nil { // NMI-disable bit set, as Linux does
			t.Fatal(err)
		}
		b := []byte{0}
		if err := r.In(RTCDataPort, b); err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	for _, tt := range []struct {
		name string
		reg  byte
		want byte
	}{
		{"seconds", 0x00, 0x08}, {"minutes", 0x02, 0x14}, {"hours", 0x04, 0x03},
		{"weekday (Tuesday)", 0x06, 0x03}, {"day", 0x07, 0x19}, {"month", 0x08, 0x01},
		{"year", 0x09, 0x38}, {"century", 0x32, 0x20},
		{"status A: UIP clear", 0x0a, 0x26}, {"status B: 24h BCD", 0x0b, 0x02}, {"status D: valid", 0x0d, 0x80},
		{"CMOS RAM starts zero", 0x20, 0},
	} {
		if got := read(tt.reg); got != tt.want {
			t.Errorf("%s (reg %#x) = %#x, want %#x", tt.name, tt.reg, got, tt.want)
		}
	}
	// CMOS RAM keeps writes; the clock registers ignore them; state round-trips.
	for _, w := range [][2]byte{{0x20, 0xab}, {0x00, 0x59}} {
		if err := r.Out(RTCIndexPort, []byte{w[0]}); err != nil {
			t.Fatal(err)
		}
		if err := r.Out(RTCDataPort, []byte{w[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if read(0x20) != 0xab || read(0x00) != 0x08 {
		t.Errorf("after writes: RAM %#x (want 0xab), seconds %#x (want 0x08)", read(0x20), read(0x00))
	}
	st := r.State()
	r2 := NewRTC(func() time.Time { return now })
	if err := r2.SetState(st); err != nil {
		t.Fatal(err)
	}
	if r2.State() != st {
		t.Errorf("state did not round-trip")
	}
	if err := r.In(RTCDataPort, make([]byte, 2)); !errors.Is(err, ErrBadAccess) {
		t.Errorf("2-byte access: %v", err)
	}
	if err := r2.SetState(RTCState{Index: 0xff}); !errors.Is(err, ErrBadState) {
		t.Errorf("bad index state: %v", err)
	}
}
