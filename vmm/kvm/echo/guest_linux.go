package echo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm"
	"github.com/themisfs/themis/vmm/kvm/devices"
)

// echoWait bounds one batch of round trips with a live guest (a round trip
// takes well under a millisecond on any /dev/kvm; 10 s leaves room for an
// emulated host).
const echoWait = 10 * time.Second

// Legacy virtio-pci register offsets the host-side probe writes (virtio
// 0.9.5; package devices serves them).
const (
	vioRegGuestFeatures = 4
	vioRegQueuePFN      = 8
	vioRegQueueSel      = 14
	vioRegQueueNotify   = 16
	vioRegStatus        = 18
)

// Guest is an echo guest (echo.go) on a bare machine (kvm.NewBare),
// talking over COM2 or the agent console.
type Guest struct {
	m    *kvm.Machine
	ch   kvm.Port // the host end of the guest's channel
	size int
	msgs [2][]byte // alternated, so a stale echo shows
	buf  []byte
	sent int
}

// Start builds a bare machine, loads the echo guest for cfg and starts
// it. verify makes every restore re-hash RAM (tests).
func Start(cfg Config, log *zap.Logger, verify bool) (_ *Guest, err error) {
	k, err := echoBuffers(cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	m, err := kvm.NewBare(vmm.Config{Log: log, Verify: verify}, 64<<20)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close())
		}
	}()
	e := &Guest{m: m, size: cfg.Size, buf: make([]byte, cfg.Size)}
	for i := range e.msgs {
		e.msgs[i] = make([]byte, cfg.Size)
		for j := range e.msgs[i] {
			e.msgs[i][j] = byte(j*7 + i*0x55 + 1)
		}
	}
	var prog []byte
	var handler uint64
	switch cfg.Channel {
	case UART:
		prog, handler = uartEchoProgram(cfg.Size)
		e.ch = m.COM2()
	case Console:
		_, bar := m.AgentConsole()
		prog, handler = consoleEchoProgram(k, bar)
		e.ch = m.AgentPort()
		if err := e.probeConsole(k); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("echo: unknown channel %q", cfg.Channel)
	}
	if err := e.load(prog, handler); err != nil {
		return nil, err
	}
	m.Resume()
	return e, nil
}

// load writes the IDT, puts the LAPIC in virtual wire mode and loads prog.
func (e *Guest) load(prog []byte, handler uint64) error {
	vm := e.m.VM()
	if err := vm.WriteRAM(echoIDTAddr, echoIDT(handler)); err != nil {
		return err
	}
	s, err := vm.Sregs()
	if err != nil {
		return err
	}
	s.IDT = kvm.DTable{Base: echoIDTAddr, Limit: 256*16 - 1}
	if err := vm.SetSregs(s); err != nil {
		return err
	}
	if err := vm.VirtualWire(); err != nil {
		return err
	}
	return vm.LoadProgram(prog)
}

// probeConsole lays out the echo guest's rings and does what Linux's
// virtcons_probe does at boot, from the host (the guest program only
// echoes): features (MULTIPORT), the four queues, DRIVER_OK, and a
// PORT_OPEN on the control queue, as a program opening the port sends it.
func (e *Guest) probeConsole(k int) error {
	for _, w := range consoleEchoRings(e.size, k) {
		if err := e.m.VM().WriteRAM(w.addr, w.b); err != nil {
			return err
		}
	}
	c, _ := e.m.AgentConsole()
	write := func(off uint16, n int, v uint32) error {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], v)
		return c.WriteBAR(off, b[:n])
	}
	type reg struct {
		off uint16
		n   int
		v   uint32
	}
	ack := uint32(devices.StatusAcknowledge | devices.StatusDriver)
	steps := []reg{{vioRegStatus, 1, ack}, {vioRegGuestFeatures, 4, devices.ConsoleFeatures}}
	for q := range uint32(4) {
		steps = append(steps, reg{vioRegQueueSel, 2, q}, reg{vioRegQueuePFN, 4, (echoRingAddr + q*echoRingStride) >> 12})
	}
	steps = append(steps, reg{vioRegStatus, 1, ack | devices.StatusDriverOK}, reg{vioRegQueueNotify, 2, 3})
	for _, s := range steps {
		if err := write(s.off, s.n, s.v); err != nil {
			return fmt.Errorf("echo: probe the console: %w", err)
		}
	}
	if st := c.State(); !st.GuestOpen || st.Status&devices.StatusNeedsReset != 0 {
		return fmt.Errorf("echo: console not open after the probe (status %#x)", st.Status)
	}
	return nil
}

// Machine is the bare machine the guest runs on.
func (e *Guest) Machine() *kvm.Machine { return e.m }

// UseChannel makes p the host end the round trips use (it must be the
// guest's channel's: kvm.Machine.COM2 or AgentPort).
func (e *Guest) UseChannel(p kvm.Port) { e.ch = p }

// Echo does n round trips: the host writes a message, the guest sends it
// back, the host reads and checks it. Each is bounded by echoWait.
func (e *Guest) Echo(n int) error {
	for range n {
		if err := e.ch.SetDeadline(time.Now().Add(echoWait)); err != nil {
			return err
		}
		msg := e.msgs[e.sent%2]
		if _, err := e.ch.Write(msg); err != nil {
			return fmt.Errorf("echo %d: write: %w (guest: %v)", e.sent, err, e.m.Dead())
		}
		for got := 0; got < len(msg); {
			k, err := e.ch.Read(e.buf[got:])
			if err != nil {
				return fmt.Errorf("echo %d: read %d of %d bytes: %w (guest: %v)", e.sent, got, len(msg), err, e.m.Dead())
			}
			got += k
		}
		if !bytes.Equal(e.buf, msg) {
			return fmt.Errorf("echo %d: the guest sent back other bytes", e.sent)
		}
		e.sent++
	}
	return e.ch.SetDeadline(time.Time{})
}

// Exits is the VM's exit counter; it stops the vCPU to read it.
func (e *Guest) Exits(ctx context.Context) (uint64, error) {
	if err := e.m.Stop(ctx); err != nil {
		return 0, err
	}
	n := e.m.VM().Stats().Exits
	e.m.Resume()
	return n, nil
}

func (e *Guest) Close() error { return e.m.Close() }

// Measure runs an echo guest on /dev/kvm (a synthetic guest: no
// kernel, runs on PVM hosts too) over cfg.Channel and measures
// cfg.Messages round trips: the exits the VMM served and the wall time.
func Measure(ctx context.Context, cfg Config, log *zap.Logger) (_ Result, err error) {
	r := Result{Channel: cfg.Channel, Size: cfg.Size, Messages: cfg.Messages}
	if cfg.Messages < 1 || cfg.Warmup < 0 {
		return r, fmt.Errorf("echo: %d messages, %d warm-up: want at least 1 and 0", cfg.Messages, cfg.Warmup)
	}
	e, err := Start(cfg, log, false)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, e.Close()) }()
	if err := e.Echo(cfg.Warmup); err != nil {
		return r, err
	}
	x0, err := e.Exits(ctx)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	for left := cfg.Messages; left > 0; left -= min(left, 1000) {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if err := e.Echo(min(left, 1000)); err != nil {
			return r, err
		}
	}
	r.Elapsed = time.Since(t0)
	x1, err := e.Exits(ctx)
	if err != nil {
		return r, err
	}
	r.Exits = x1 - x0
	r.ExitsPerEcho = float64(r.Exits) / float64(cfg.Messages)
	r.NsPerEcho = float64(r.Elapsed.Nanoseconds()) / float64(cfg.Messages)
	return r, nil
}
