package kvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/internal/kvmtest"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm/devices"
	"github.com/themisfs/themis/vmm/kvm/x86asm"
	"go.uber.org/zap/zaptest"
)

// newDeviceMachine is a Machine without a kernel: the VM runs a
// synthetic program that drives the Linux machine's devices (UARTs, PCI,
// virtio-blk) over port I/O, with the disks' overlays in lockstep.
func newDeviceMachine(t *testing.T, disks []vmm.Disk) *Machine {
	t.Helper()
	vm := newVM(t, VMConfig{MemoryBytes: 64 << 20})
	// Verify: every restore checks RAM and disks against the checkpoint's
	// hashes (device writes into guest RAM must revert too).
	lm, err := newMachine(vmm.Config{Disks: disks, Log: zaptest.NewLogger(t), Verify: true}, vm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lm.Close(); err != nil {
			t.Error(err)
		}
	})
	return lm
}

func testDisk(t *testing.T, size int) vmm.Disk {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := overlay.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return vmm.Disk{Serial: "lane0", Device: d}
}

// Legacy virtqueue layout for the test ring (queue size 256).
const (
	ringAddr   = 0x200000
	availAddr  = ringAddr + 256*16
	usedAddr   = ringAddr + 2*PageSize
	reqHdrAddr = 0x210000
	reqData    = 0x211000
	reqStatus  = 0x212000
	serialIn   = DataAddr + 0x100
	barPort    = devices.PCIIOBase + devices.PCIIOStride // slot 1
)

// writeBlockRequest puts one virtio-blk write request in guest RAM: the
// descriptors (header: type OUT, sector 2; 512 bytes of 'Z'; status) and
// the available ring.
func writeBlockRequest(t *testing.T, m *VM) {
	t.Helper()
	desc := func(i int, addr uint64, n uint32, flags, next uint16) {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, addr)
		binary.LittleEndian.PutUint32(b[8:], n)
		binary.LittleEndian.PutUint16(b[12:], flags)
		binary.LittleEndian.PutUint16(b[14:], next)
		if err := m.WriteRAM(ringAddr+uint64(16*i), b); err != nil {
			t.Fatal(err)
		}
	}
	const next, write = 1, 2
	desc(0, reqHdrAddr, 16, next, 1)
	desc(1, reqData, 512, next, 2)
	desc(2, reqStatus, 1, write, 0)
	hdr := make([]byte, 16)
	binary.LittleEndian.PutUint32(hdr, 1) // VIRTIO_BLK_T_OUT
	binary.LittleEndian.PutUint64(hdr[8:], 2)
	for _, w := range []struct {
		addr uint64
		b    []byte
	}{
		{reqHdrAddr, hdr}, {reqData, bytes.Repeat([]byte{'Z'}, 512)}, {reqStatus, []byte{0xff}},
		{availAddr, []byte{0, 0, 1, 0, 0, 0}}, // flags 0, idx 1, ring[0] = 0
	} {
		if err := m.WriteRAM(w.addr, w.b); err != nil {
			t.Fatal(err)
		}
	}
}

// sector2 reads sector 2 of disk.
func sector2(t *testing.T, disk vmm.Disk) []byte {
	t.Helper()
	b := make([]byte, 512)
	if _, err := disk.Device.ReadAt(b, 2*512); err != nil {
		t.Fatal(err)
	}
	return b
}

// checkDeviceRound checks one run of TestDevicePathReverts' guest: it sent
// "hi", wrote sector 2, read "abc" from the UART, and its request completed.
func checkDeviceRound(ctx context.Context, t *testing.T, lm *Machine, disk vmm.Disk, round string) {
	t.Helper()
	got := make([]byte, 2)
	if err := lm.uart.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 2; {
		k, err := lm.uart.Read(got[n:])
		if err != nil {
			t.Fatalf("%s: reading what the guest sent: %v (got %q)", round, err, got[:n])
		}
		n += k
	}
	if string(got) != "hi" {
		t.Fatalf("%s: guest sent %q, want \"hi\"", round, got)
	}
	// The deadline was for that read only: the host writes to the channel
	// later, maybe more than 10 s later on a slow (emulated) host.
	if err := lm.uart.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Equal(sector2(t, disk), bytes.Repeat([]byte{'Z'}, 512)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: sector 2 never written; console %s; dead %v", round, lm.console.tail(), lm.deadErr())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := lm.RAMHash(ctx); err != nil { // pauses: RAM is stable to read
		t.Fatal(err)
	}
	if got := lm.vm.mem[serialIn : serialIn+3]; string(got) != "abc" {
		t.Errorf("%s: guest read %q from the UART, want \"abc\"", round, got)
	}
	if st := lm.vm.mem[reqStatus]; st != 0 {
		t.Errorf("%s: request status %d, want 0 (OK)", round, st)
	}
	if used := binary.LittleEndian.Uint16(lm.vm.mem[usedAddr+2:]); used != 1 {
		t.Errorf("%s: used idx %d, want 1", round, used)
	}
}

// TestDevicePathReverts: a synthetic guest sends bytes on the agent UART,
// reads the host's bytes from it, and writes a sector through virtio-blk.
// Restoring the checkpoint taken before puts back RAM, the UART's receive
// queue, the virtqueue cursors and the disk; the guest then does it all
// again, the same way.
func TestDevicePathReverts(t *testing.T) {
	ctx := context.Background()
	disk := testDisk(t, 1<<20)
	lm := newDeviceMachine(t, []vmm.Disk{disk})
	m := lm.vm
	writeBlockRequest(t, m)
	prog := new(x86asm.Asm).
		Outb(devices.COM2Port, 'h').Outb(devices.COM2Port, 'i').
		ReadSerial(devices.COM2Port, serialIn, 3).
		Outb(barPort+18, devices.StatusAcknowledge|devices.StatusDriver).
		Out(barPort+8, ringAddr/PageSize).
		Outb(barPort+18, devices.StatusAcknowledge|devices.StatusDriver|devices.StatusDriverOK).
		Outw(barPort+16, 0).
		CliHLT()
	if err := m.LoadProgram(prog.Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, err := lm.uart.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	c0, err := lm.Checkpoint(ctx) // the guest starts running after it
	if err != nil {
		t.Fatal(err)
	}
	checkDeviceRound(ctx, t, lm, disk, "first run")
	h1, _ := lm.RAMHash(ctx)

	// The guest now sits in HLT. c1 holds the written sector; later host
	// writes to the disk and bytes fed to the UART are undone by a restore.
	c1, err := lm.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := disk.Device.WriteAt(bytes.Repeat([]byte{'!'}, 512), 2*512); err != nil {
		t.Fatal(err)
	}
	if _, err := lm.uart.Write([]byte("xyz")); err != nil {
		t.Fatal(err)
	}
	if err := lm.Restore(ctx, c1); err != nil {
		t.Fatal(err)
	}
	if got := sector2(t, disk); !bytes.Equal(got, bytes.Repeat([]byte{'Z'}, 512)) {
		t.Errorf("sector 2 after restoring c1: %q..., want the checkpoint's 'Z's", got[:8])
	}
	if rx := lm.com2.State().RX; len(rx) != 0 {
		t.Errorf("UART receive queue after restoring c1: %q, want empty", rx)
	}
	if h, _ := lm.RAMHash(ctx); h != h1 {
		t.Errorf("RAM after restoring c1 %x, want %x", h[:8], h1[:8])
	}

	if err := lm.Restore(ctx, c0); err != nil {
		t.Fatal(err)
	}
	// Restore resumed the guest from c0: with the receive queue ("abc"
	// pending), the queue cursors and the disk put back, it redoes the
	// same work.
	checkDeviceRound(ctx, t, lm, disk, "after restore")
	h2, _ := lm.RAMHash(ctx)
	if h1 != h2 {
		t.Errorf("RAM after the replay %x differs from the first run %x", h2[:8], h1[:8])
	}
	if st := lm.blocks[0].Stats(); st.Requests != 2 {
		t.Errorf("block device served %d requests, want 2 (once per run)", st.Requests)
	}
}

// TestLinuxMachineGuestDies: a guest that writes to a port nobody serves,
// or triple-faults, ends its run with an error naming the exit and RIP;
// calls then fail with vmm.ErrGuestDied, and restoring a checkpoint brings
// the machine back (the agent channel included).
func TestLinuxMachineGuestDies(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name, reason string
		prog         *x86asm.Asm
	}{
		{"unknown port", "IO", new(x86asm.Asm).Outb(0x3333, 1).CliHLT()},
		{"triple fault", "SHUTDOWN", new(x86asm.Asm).Emit(0x0f, 0x0b)}, // ud2 with no IDT
		{"reset", "IO", new(x86asm.Asm).Outb(0x64, 0xfe).CliHLT()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lm := newDeviceMachine(t, nil)
			lm.strictPorts = true // 0x3333 would read all ones otherwise (TestUnclaimedPorts)
			// The program first echoes one byte on the agent channel, then dies.
			prog := new(x86asm.Asm).ReadSerial(devices.COM2Port, serialIn, 1).Outb(devices.COM2Port, 'k')
			prog.Emit(tt.prog.Bytes()...)
			if err := lm.vm.LoadProgram(prog.Bytes()); err != nil {
				t.Fatal(err)
			}
			c0, err := lm.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 {
				if _, err := lm.uart.Write([]byte("x")); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				b := make([]byte, 1)
				if err := lm.uart.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
					t.Fatal(err)
				}
				if _, err := lm.uart.Read(b); err != nil || b[0] != 'k' {
					t.Fatalf("round %d: echo %q, %v", round, b, err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for lm.deadErr() == nil && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				var ee *ExitError
				if err := lm.deadErr(); !errors.As(err, &ee) || ee.Reason != tt.reason || ee.RIP == 0 {
					t.Fatalf("round %d: guest end %v, want an ExitError %s with its RIP", round, err, tt.reason)
				}
				ping := &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
				if _, err := lm.Call(ctx, ping); !errors.Is(err, vmm.ErrGuestDied) {
					t.Errorf("round %d: call into a dead guest: %v, want ErrGuestDied", round, err)
				}
				if _, err := lm.Checkpoint(ctx); !errors.Is(err, vmm.ErrGuestDied) {
					t.Errorf("round %d: checkpoint of a dead guest: %v, want ErrGuestDied", round, err)
				}
				if err := lm.Restore(ctx, c0); err != nil {
					t.Fatalf("round %d: restore of a dead guest: %v", round, err)
				}
			}
		})
	}
}

// TestUnclaimedPorts: as on a PC, a port nothing serves (a generic
// kernel's Super I/O probe at 0x4e/0x4f, a port no table names) reads all
// ones and drops writes, counted per port; the guest runs on (it echoes
// what it read on the agent channel). Strict, the same access fails the
// run naming the port.
func TestUnclaimedPorts(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			lm := newDeviceMachine(t, nil)
			lm.strictPorts = strict
			prog := new(x86asm.Asm).ReadSerial(devices.COM2Port, serialIn, 1).Outb(0x4e, 0x55).Inb(0x4f).OutbAL(devices.COM2Port).
				Inb(0x3333).OutbAL(devices.COM2Port).CliHLT()
			if err := lm.vm.LoadProgram(prog.Bytes()); err != nil {
				t.Fatal(err)
			}
			lm.resume()
			if _, err := lm.uart.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if strict {
				var ee *ExitError
				deadline := time.Now().Add(10 * time.Second)
				for lm.deadErr() == nil && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if derr := lm.deadErr(); !errors.As(derr, &ee) || ee.Reason != "IO" || !strings.Contains(derr.Error(), "unknown port 0x4e") {
					t.Errorf("strict: the guest ended %v, want an IO exit naming port 0x4e", derr)
				}
				return
			}
			if err := lm.uart.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 2)
			if _, err := io.ReadFull(lm.uart, got); err != nil || got[0] != 0xff || got[1] != 0xff {
				t.Fatalf("IN from unclaimed ports 0x4f and 0x3333 read %#x, %v; want 0xff 0xff", got, err)
			}
			for _, port := range []string{"0x4e", "0x4f", "0x3333"} {
				if n := lm.absentAccess["unclaimed port "+port]; n != 1 {
					t.Errorf("unclaimed port %s counted %d times, want 1", port, n)
				}
			}
			if lm.deadErr() != nil {
				t.Errorf("the guest died: %v", lm.deadErr())
			}
		})
	}
}

// TestLinuxMachineCloseReleases: Close of a running Linux machine (its
// runner in KVM_RUN) frees every fd and mapping; a second Close is a no-op.
func TestLinuxMachineCloseReleases(t *testing.T) {
	kvmtest.Need(t)
	disk := testDisk(t, 1<<20)
	fds, maps := countFDs(t), countMaps(t)
	depth := disk.Device.Depth()
	for range 3 {
		vm, err := NewVM(VMConfig{MemoryBytes: 32 << 20})
		if err != nil {
			t.Fatal(err)
		}
		lm, err := newMachine(vmm.Config{Disks: []vmm.Disk{disk}, Log: zaptest.NewLogger(t)}, vm)
		if err != nil {
			t.Fatal(err)
		}
		if err := vm.LoadProgram(new(x86asm.Asm).CliHLT().Bytes()); err != nil {
			t.Fatal(err)
		}
		if _, err := lm.Checkpoint(context.Background()); err != nil { // starts the runner
			t.Fatal(err)
		}
		if err := lm.Close(); err != nil {
			t.Fatal(err)
		}
		if err := lm.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		if err := disk.Device.PopTo(depth); err != nil {
			t.Fatal(err)
		}
	}
	if got := countFDs(t); got != fds {
		t.Errorf("fds: %d after, %d before", got, fds)
	}
	if got := countMaps(t); got != maps {
		t.Errorf("guest RAM / kvm_run mappings: %d after, %d before", got, maps)
	}
}
