package kvm

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm/devices"
	"github.com/themisfs/themis/vmm/kvm/x86asm"
)

// The hostile-guest cases of the fault suite (docs/reliability.md, "The
// fault suite"): synthetic guests on a Linux machine's devices that never
// exit, post broken virtqueues, or flood the console. Each checks that the
// machine bounds the guest with an error (never a panic or a hang of the
// host process) and that Close releases every fd and goroutine.

// hostileBound is how long a bounded operation may take before the test
// calls it a hang: a liveness check, not a timing one (each takes
// milliseconds; the bound is far above that under -race on a loaded
// 2-core CI machine, and far below the test timeout).
const hostileBound = 30 * time.Second

// noLeaks snapshots fds, guest RAM and kvm_run mappings and goroutines
// (vmmtest.Leaks' checks, which this package cannot import, and
// goroutines); the returned check, called after Close, fails t if any are
// left.
func noLeaks(t *testing.T) func() {
	t.Helper()
	fds, maps, g0 := countFDs(t), countMaps(t), runtime.NumGoroutine()
	return func() {
		t.Helper()
		if f, m := countFDs(t), countMaps(t); f > fds || m > maps {
			t.Errorf("leak: fds %d -> %d, mappings %d -> %d", fds, f, maps, m)
		}
		deadline := time.Now().Add(hostileBound)
		for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if g := runtime.NumGoroutine(); g > g0 {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutines: %d before, %d after Close:\n%s", g0, g, buf[:runtime.Stack(buf, true)])
		}
	}
}

// timed runs f and fails t if it took longer than hostileBound.
func timed(t *testing.T, what string, f func()) time.Duration {
	t.Helper()
	t0 := time.Now()
	f()
	d := time.Since(t0)
	if d > hostileBound {
		t.Errorf("%s took %v, want under %v", what, d, hostileBound)
	}
	return d
}

var ping = &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}

// TestHostileSpin: a vCPU that never leaves the guest (jmp $, with
// interrupts on or off) or leaves it only to poll the agent UART, never
// answering: a call with a deadline returns the deadline error, a
// checkpoint kicks the vCPU out (immediate_exit and a signal) and goes
// on, Close of a machine whose call is still waiting returns at once, and
// nothing is left behind.
func TestHostileSpin(t *testing.T) {
	poll := new(x86asm.Asm)
	loop := poll.Label()
	poll.Inb(devices.COM2Port + 5).Jmp(loop)
	for _, tt := range []struct {
		name string
		prog *x86asm.Asm
	}{
		{"jmp-self", new(x86asm.Asm).Spin()},
		{"cli-jmp-self", new(x86asm.Asm).Cli().Spin()},
		{"poll-uart", poll},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leaks := noLeaks(t)
			ctx := context.Background()
			lm := spinningMachine(t, tt.prog)
			d := timed(t, "a call with a 200 ms deadline", func() {
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				if _, err := lm.Call(cctx, ping); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("call into a spinning guest: %v, want a deadline error", err)
				}
			})
			t.Logf("call with a 200 ms deadline returned after %v", d)
			d = timed(t, "a checkpoint", func() {
				if _, err := lm.Checkpoint(ctx); err != nil {
					t.Errorf("checkpoint of a spinning guest: %v", err)
				}
			})
			t.Logf("checkpoint (pause, save, resume) took %v", d)
			d = timed(t, "Close", func() {
				if err := lm.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			t.Logf("Close took %v", d)

			// A call that would wait 60 s, and Close from another goroutine.
			lm = spinningMachine(t, tt.prog)
			called := make(chan error, 1)
			go func() {
				cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				_, err := lm.Call(cctx, ping)
				called <- err
			}()
			time.Sleep(100 * time.Millisecond)
			d = timed(t, "Close during a call", func() {
				if err := lm.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			t.Logf("Close during a call took %v", d)
			select {
			case err := <-called:
				if !errors.Is(err, vmm.ErrClosed) && !errors.Is(err, vmm.ErrGuestDied) {
					t.Errorf("the call waiting when Close came: %v, want ErrClosed or ErrGuestDied", err)
				}
				t.Logf("the waiting call: %v", err)
			case <-time.After(hostileBound):
				t.Fatal("the call did not return after Close")
			}
			leaks()
		})
	}
}

// spinningMachine is a device machine running prog.
func spinningMachine(t *testing.T, prog *x86asm.Asm) *Machine {
	t.Helper()
	lm := newDeviceMachine(t, nil)
	if err := lm.vm.LoadProgram(prog.Bytes()); err != nil {
		t.Fatal(err)
	}
	lm.resume()
	return lm
}

// TestHostileVirtqueue: a running guest notifies the virtio-blk device of
// broken descriptor chains (the rings written from the host side): loops,
// buffers outside guest RAM, lengths of 4 GiB or past the disk, indices
// past the queue. The device refuses each (NEEDS_RESET, or the request
// fails with an I/O error status) after bounded work without allocating,
// the guest goes on, and Close releases everything. (FuzzBlockQueue covers
// the chains on the device alone; this is the path through a running VM.)
func TestHostileVirtqueue(t *testing.T) {
	const next, write = 1, 2
	type desc struct {
		addr  uint64
		n     uint32
		flags uint16
		next  uint16
	}
	hdr := desc{reqHdrAddr, 16, next, 1}
	status := desc{reqStatus, 1, write, 0}
	for _, tt := range []struct {
		name      string
		descs     []desc
		availIdx  uint16 // the avail ring's idx (1 when 0)
		head      uint16 // ring[0]
		needReset bool   // else the request completes with an I/O error
	}{
		{name: "loop", descs: []desc{hdr, {reqData, 512, next, 0}}, needReset: true},
		{name: "self-loop", descs: []desc{{reqHdrAddr, 16, next, 0}}, needReset: true},
		{name: "next-past-queue", descs: []desc{{reqHdrAddr, 16, next, 300}}, needReset: true},
		{name: "head-past-queue", descs: []desc{hdr, status}, head: 256, needReset: true},
		{name: "avail-idx-past-queue", descs: []desc{hdr, status}, availIdx: 1000, needReset: true},
		{name: "status-outside-ram", descs: []desc{hdr, {1 << 40, 1, write, 0}}, needReset: true},
		{name: "header-outside-ram", descs: []desc{{^uint64(0) - 8, 16, next, 1}, status}},
		{name: "data-4GiB", descs: []desc{hdr, {reqData, ^uint32(0), next | write, 2}, status}},
		{name: "data-past-disk", descs: []desc{hdr, {0x400000, 48 << 20, next | write, 2}, status}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			disk := testDisk(t, 1<<20)
			leaks := noLeaks(t)
			lm := newDeviceMachine(t, []vmm.Disk{disk})
			m := lm.vm
			for i, d := range tt.descs {
				b := binary.LittleEndian.AppendUint64(nil, d.addr)
				b = binary.LittleEndian.AppendUint32(b, d.n)
				b = binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(b, d.flags), d.next)
				if err := m.WriteRAM(ringAddr+uint64(16*i), b); err != nil {
					t.Fatal(err)
				}
			}
			idx := max(tt.availIdx, 1)
			avail := binary.LittleEndian.AppendUint16([]byte{0, 0}, idx)
			avail = binary.LittleEndian.AppendUint16(avail, tt.head)
			hd := make([]byte, 16) // VIRTIO_BLK_T_IN, sector 0
			for _, w := range []struct {
				addr uint64
				b    []byte
			}{{availAddr, avail}, {reqHdrAddr, hd}, {reqStatus, []byte{0xff}}} {
				if err := m.WriteRAM(w.addr, w.b); err != nil {
					t.Fatal(err)
				}
			}
			prog := new(x86asm.Asm).
				Outb(barPort+18, devices.StatusAcknowledge|devices.StatusDriver).
				Out(barPort+8, ringAddr/PageSize).
				Outb(barPort+18, devices.StatusAcknowledge|devices.StatusDriver|devices.StatusDriverOK).
				Outw(barPort+16, 0).
				Outb(devices.COM2Port, 'k'). // the notify was served: the guest goes on
				CliHLT()
			if err := m.LoadProgram(prog.Bytes()); err != nil {
				t.Fatal(err)
			}
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			lm.resume()
			got := make([]byte, 1)
			if err := lm.uart.SetDeadline(time.Now().Add(hostileBound)); err != nil {
				t.Fatal(err)
			}
			if _, err := lm.uart.Read(got); err != nil || got[0] != 'k' {
				t.Fatalf("the guest after its notify: %q, %v (dead: %v)", got, err, lm.deadErr())
			}
			runtime.ReadMemStats(&ms1)
			if grew := int64(ms1.TotalAlloc - ms0.TotalAlloc); grew > 1<<20 {
				t.Errorf("the device allocated %d bytes serving one broken chain", grew)
			}
			if _, err := lm.RAMHash(context.Background()); err != nil { // pauses: RAM and device stable
				t.Fatal(err)
			}
			st, stats := lm.blocks[0].State(), lm.blocks[0].Stats()
			t.Logf("status %#x, ISR %#x, stats %+v, request status %d, allocated %d bytes", st.Status, st.ISR, stats,
				m.mem[reqStatus], ms1.TotalAlloc-ms0.TotalAlloc)
			switch {
			case lm.deadErr() != nil:
				t.Errorf("the machine died: %v", lm.deadErr())
			case tt.needReset && (st.Status&devices.StatusNeedsReset == 0 || stats.Requests != 0):
				t.Errorf("device status %#x after %d requests, want NEEDS_RESET and none served", st.Status, stats.Requests)
			case !tt.needReset && (st.Status&devices.StatusNeedsReset != 0 || stats.Requests != 1 || m.mem[reqStatus] != 1):
				t.Errorf("device status %#x, %d requests, request status %d: want the request failed with VIRTIO_BLK_S_IOERR",
					st.Status, stats.Requests, m.mem[reqStatus])
			case stats.BytesRead != 0 || stats.BytesWritten != 0:
				t.Errorf("the device moved data for a broken request: %+v", stats)
			}
			timed(t, "Close", func() {
				if err := lm.Close(); err != nil {
					t.Error(err)
				}
			})
			leaks()
		})
	}
}

// consoleKeptMax is the most console text the host keeps, in bytes: the
// consoleKeep last lines of at most maxConsoleLine bytes (each with the
// note of what was skipped) and one partial line.
const consoleKeptMax = (consoleKeep + 1) * (maxConsoleLine + 64)

// consoleHeldMax bounds consoleRetained: the kept lines and the partial
// line's buffer, which append may have grown to twice a line.
const consoleHeldMax = consoleKeep*(maxConsoleLine+64) + 2*maxConsoleLine

// consoleRetained is the bytes c holds: its kept lines and the capacity
// of its partial line.
func consoleRetained(c *console) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := cap(c.partial)
	for _, l := range c.lines {
		n += len(l)
	}
	return n
}

// TestHostileConsoleFlood: a guest writes to its console (COM1) without
// end (rep outsb: one exit per byte under PVM, per 4 KiB page with
// hardware virtualization) in short lines, in lines 16 times longer than
// the console keeps of one, or in one line that never ends, and echoes
// what the host sends on the agent UART between bursts. The host keeps
// what console.go bounds it to (the last consoleKeep lines, each cut at
// maxConsoleLine, and one partial line: consoleRetained, counted in the
// console itself, not the noisy heap), the agent channel still answers
// during the flood, and Close returns. The floods are small (a few seconds of PVM exits);
// docs/reliability.md has the 8 MiB run.
func TestHostileConsoleFlood(t *testing.T) {
	for _, tt := range []struct {
		name    string
		chunk   int // bytes per rep outsb
		newline bool
		flood   uint64 // bytes the guest writes before the checks
	}{
		{"lines-64", 64, true, 128 << 10},
		{"lines-64KiB", 64 << 10, true, 256 << 10},
		{"one-line", 8 << 10, false, 128 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leaks := noLeaks(t)
			lm := newDeviceMachine(t, nil)
			buf := make([]byte, tt.chunk)
			for i := range buf {
				buf[i] = 'a' + byte(i%26)
			}
			if tt.newline {
				buf[len(buf)-1] = '\n'
			}
			if err := lm.vm.WriteRAM(DataAddr, buf); err != nil {
				t.Fatal(err)
			}
			a := new(x86asm.Asm)
			loop := a.Label()
			a.MovImm(x86asm.RSI, DataAddr).MovImm(x86asm.RCX, uint64(tt.chunk)).Emit(0xba).Imm32(devices.COM1Port).Emit(0xf3, 0x6e) // rep outsb
			a.Inb(devices.COM2Port+5).TestAL(1).Jcc(x86asm.CCZ, loop)
			a.Inb(devices.COM2Port).OutbAL(devices.COM2Port).Jmp(loop)
			if err := lm.vm.LoadProgram(a.Bytes()); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			lm.resume()
			for lm.com1.Stats().TXBytes < tt.flood {
				if time.Since(t0) > 60*time.Second || lm.deadErr() != nil {
					t.Fatalf("the guest wrote %d bytes in %v (dead: %v)", lm.com1.Stats().TXBytes, time.Since(t0), lm.deadErr())
				}
				time.Sleep(10 * time.Millisecond)
			}
			elapsed := time.Since(t0)
			echo := timed(t, "an echo on the agent UART during the flood", func() {
				if _, err := lm.uart.Write([]byte("q")); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 1)
				if err := lm.uart.SetDeadline(time.Now().Add(hostileBound)); err != nil {
					t.Fatal(err)
				}
				if _, err := lm.uart.Read(got); err != nil || got[0] != 'q' {
					t.Errorf("echo during the flood: %q, %v", got, err)
				}
			})
			wrote := lm.com1.Stats().TXBytes
			kept, held := len(lm.Console()), consoleRetained(lm.console)
			t.Logf("%d console bytes in %v, the console keeps %d bytes (%d held), echo in %v", wrote, elapsed, kept, held, echo)
			if kept > consoleKeptMax || held > consoleHeldMax {
				t.Errorf("after %d console bytes the console keeps %d bytes and holds %d: want at most %d and %d",
					wrote, kept, held, consoleKeptMax, consoleHeldMax)
			}
			timed(t, "Close during the flood", func() {
				if err := lm.Close(); err != nil {
					t.Error(err)
				}
			})
			leaks()
		})
	}
}
