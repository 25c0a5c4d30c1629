package kvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/kvmtest"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm/x86asm"
	"go.uber.org/zap/zaptest"
)

func newVM(t testing.TB, cfg VMConfig) *VM {
	t.Helper()
	kvmtest.Need(t)
	if tt, ok := t.(*testing.T); ok && cfg.Log == nil {
		cfg.Log = zaptest.NewLogger(tt)
	}
	m, err := NewVM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func mustRun(t testing.TB, m *VM, wantCode uint32) Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := m.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if e.Reason != ExitDebug || e.Code != wantCode {
		t.Fatalf("Run = %+v, want debug exit %d", e, wantCode)
	}
	return e
}

// dirtyModes are the two dirty-tracking modes every memory test runs in.
var dirtyModes = []struct {
	name string
	cfg  VMConfig
}{
	{"bitmap", VMConfig{}},
	{"ring", VMConfig{DirtyRing: true, DirtyRingBytes: 1 << 20}},
}

// TestDirtyRingFull: a ring smaller than the pages a run dirties either
// works (hardware virtualization: harvest on DIRTY_RING_FULL and go on) or
// fails with ErrRingOverflow (PVM, whose ring overflows before that exit).
func TestDirtyRingFull(t *testing.T) {
	ctx := context.Background()
	m := newVM(t, VMConfig{DirtyRing: true, DirtyRingBytes: 4096})
	if err := m.LoadProgram(new(x86asm.Asm).DirtyPages(DataAddr, 1000).Out(DebugExitPort, 1).Bytes()); err != nil {
		t.Fatal(err)
	}
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h0, _ := m.RAMHash(ctx)
	_, err = m.Run(ctx)
	if hw, _ := HardwareVirtualization(); !hw {
		if !errors.Is(err, ErrRingOverflow) {
			t.Fatalf("Run = %v, want ErrRingOverflow on this host", err)
		}
		t.Log(err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(ctx, c0); err != nil {
		t.Fatal(err)
	}
	if h, _ := m.RAMHash(ctx); h != h0 {
		t.Fatal("RAM hash differs after restore")
	}
}

func TestDirtyPagesRestoreHash(t *testing.T) {
	ctx := context.Background()
	for _, mode := range dirtyModes {
		for _, n := range []int{1, 10, 100, 1000} {
			t.Run(fmt.Sprintf("%s/pages=%d", mode.name, n), func(t *testing.T) {
				cfg := mode.cfg
				cfg.MemoryBytes = 32 << 20
				m := newVM(t, cfg)
				prog := new(x86asm.Asm).DirtyPages(DataAddr, n).Out(DebugExitPort, 1)
				if err := m.LoadProgram(prog.Bytes()); err != nil {
					t.Fatal(err)
				}
				c0, err := m.Checkpoint(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := m.RAMHash(ctx)
				for round := range 3 { // restore again and again: the checkpoint stays
					mustRun(t, m, 1)
					if got, _ := m.RAMHash(ctx); got == want {
						t.Fatal("guest run left RAM unchanged")
					}
					if err := m.Restore(ctx, c0); err != nil {
						t.Fatal(err)
					}
					if got, _ := m.RAMHash(ctx); got != want {
						t.Fatalf("round %d: RAM hash after restore differs from the checkpoint's", round)
					}
					st := m.Stats()
					// n data pages plus the page-table pages whose accessed/dirty
					// bits changed, and nothing like all of RAM.
					if st.RestorePages < n || st.RestorePages > n+16 {
						t.Errorf("round %d: restore copied %d pages for %d dirtied", round, st.RestorePages, n)
					}
					if r, _ := m.Regs(); r.RIP != CodeAddr {
						t.Errorf("RIP after restore = %#x, want %#x", r.RIP, CodeAddr)
					}
				}
			})
		}
	}
}

func TestNestedCheckpoints(t *testing.T) {
	ctx := context.Background()
	for _, mode := range dirtyModes {
		t.Run(mode.name, func(t *testing.T) {
			m := newVM(t, mode.cfg)
			// Three phases, each dirtying its own and a shared page, ending
			// with a debug exit carrying the phase number.
			var p x86asm.Asm
			for phase := range uint32(3) {
				p.DirtyPages(DataAddr+uint64(phase)*0x10000, 5)
				p.MovImm(x86asm.RDI, DataAddr+0x80000).MovImm(x86asm.RAX, uint64(phase+1)).StoreRAXAtRDI()
				p.Out(DebugExitPort, phase+1)
			}
			if err := m.LoadProgram(p.Bytes()); err != nil {
				t.Fatal(err)
			}
			var ids []vmm.CheckpointID
			var hashes [][32]byte
			for phase := range uint32(3) {
				id, err := m.Checkpoint(ctx)
				if err != nil {
					t.Fatal(err)
				}
				h, _ := m.RAMHash(ctx)
				ids, hashes = append(ids, id), append(hashes, h)
				mustRun(t, m, phase+1)
			}
			for _, k := range []int{1, 0} {
				if err := m.Restore(ctx, ids[k]); err != nil {
					t.Fatal(err)
				}
				if h, _ := m.RAMHash(ctx); h != hashes[k] {
					t.Fatalf("restore C%d: RAM hash differs", k)
				}
				if got, want := fmt.Sprint(m.Checkpoints()), fmt.Sprint(ids[:k+1]); got != want {
					t.Fatalf("path after restore C%d = %s, want %s", k, got, want)
				}
			}
			if err := m.Restore(ctx, ids[2]); !errors.Is(err, vmm.ErrUnknownCheckpoint) {
				t.Fatalf("restore of a dropped checkpoint: %v, want ErrUnknownCheckpoint", err)
			}
			// Run forward again from C0 and check the guest redoes phase 1.
			mustRun(t, m, 1)
		})
	}
}

func TestDeleteMiddleCheckpoint(t *testing.T) {
	ctx := context.Background()
	m := newVM(t, VMConfig{})
	var p x86asm.Asm
	for phase := range uint32(3) {
		p.DirtyPages(DataAddr, 3+int(phase)).Out(DebugExitPort, phase+1)
	}
	if err := m.LoadProgram(p.Bytes()); err != nil {
		t.Fatal(err)
	}
	var ids []vmm.CheckpointID
	var hashes [][32]byte
	for phase := range uint32(3) {
		id, err := m.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := m.RAMHash(ctx)
		ids, hashes = append(ids, id), append(hashes, h)
		// Make each phase's data differ: the host bumps a page the guest also writes.
		if err := m.WriteRAM(DataAddr+8, []byte{byte(phase + 1)}); err != nil {
			t.Fatal(err)
		}
		mustRun(t, m, phase+1)
	}
	if err := m.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{2, 0} {
		if err := m.Restore(ctx, ids[k]); err != nil {
			t.Fatal(err)
		}
		if h, _ := m.RAMHash(ctx); h != hashes[k] {
			t.Fatalf("restore C%d after deleting C1: RAM hash differs", k)
		}
	}
}

// regVal is the value the register test's guest puts in register r.
func regVal(r int) uint64 {
	v := uint64(0x1111111111111111)
	return v * uint64(r+1)
}

func TestRegistersRevert(t *testing.T) {
	ctx := context.Background()
	m := newVM(t, VMConfig{})
	var p x86asm.Asm
	for r := range 16 {
		if r != x86asm.RSP {
			p.MovImm(r, regVal(r))
		}
	}
	p.LoadDataSegs(0x18)
	p.Wrmsr(0xc0000100, 0x123456000) // FS base
	p.Out(DebugExitPort, 9)
	if err := m.LoadProgram(p.Bytes()); err != nil {
		t.Fatal(err)
	}
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	regs0, _ := m.Regs()
	sregs0, _ := m.Sregs()
	mustRun(t, m, 9)
	regs1, _ := m.Regs()
	sregs1, _ := m.Sregs()
	if want := regVal(x86asm.R15); regs1.R15 != want || sregs1.ES.Selector != 0x18 || sregs1.FS.Base != 0x123456000 {
		t.Fatalf("guest did not change its registers: r15=%#x es=%#x fs.base=%#x", regs1.R15, sregs1.ES.Selector, sregs1.FS.Base)
	}
	if err := m.Restore(ctx, c0); err != nil {
		t.Fatal(err)
	}
	regs2, _ := m.Regs()
	sregs2, _ := m.Sregs()
	if regs2 != regs0 {
		t.Errorf("regs after restore:\n got %+v\nwant %+v", regs2, regs0)
	}
	if sregs2 != sregs0 {
		t.Errorf("sregs after restore:\n got %+v\nwant %+v", sregs2, sregs0)
	}
}

func TestXSAVERoundTrip(t *testing.T) {
	ctx := context.Background()
	m := newVM(t, VMConfig{})
	if !m.hasXSAVE {
		t.Skip("host has no KVM_CAP_XSAVE")
	}
	x, err := m.XSAVE()
	if err != nil {
		t.Fatal(err)
	}
	pattern := func(x *XSAVE, seed byte, avx bool) {
		b := xsaveBytes(x)
		for i := 160; i < 416; i++ { // XMM0-15
			b[i] = seed + byte(i)
		}
		b[512] |= 2 // XSTATE_BV: SSE
		if avx {
			for i := 576; i < 832; i++ { // YMM_Hi128
				b[i] = seed ^ byte(i)
			}
			b[512] |= 4
		}
		setXSAVEBytes(x, b)
	}
	avx := m.cpuidHas(1, 0, 'c', 28)
	want := *x
	pattern(&want, 0x40, avx)
	if err := m.SetXSAVE(&want); err != nil {
		t.Fatalf("SetXSAVE (avx=%v): %v", avx, err)
	}
	got0, _ := m.XSAVE()
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := *got0
	pattern(&other, 0x99, avx)
	if err := m.SetXSAVE(&other); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(ctx, c0); err != nil {
		t.Fatal(err)
	}
	got, _ := m.XSAVE()
	gb, wb := xsaveBytes(got), xsaveBytes(&want)
	for _, r := range [][2]int{{160, 416}, {576, 832}} {
		if !avx && r[0] == 576 {
			continue
		}
		if string(gb[r[0]:r[1]]) != string(wb[r[0]:r[1]]) {
			t.Errorf("XSAVE bytes %d..%d differ after restore", r[0], r[1])
		}
	}
	t.Logf("XMM0-15 round-tripped; YMM upper halves: %v", avx)
}

func TestScratchDeviceReverts(t *testing.T) {
	ctx := context.Background()
	m := newVM(t, VMConfig{})
	// The guest reads the scratch register, stores it in RAM, adds one and
	// writes it back: device state and memory move together.
	var p x86asm.Asm
	p.In(ScratchPort)
	p.MovImm(x86asm.RDI, DataAddr).StoreRAXAtRDI()
	p.Emit(0x83, 0xc0, 0x01) // add eax, 1
	p.OutEAX(ScratchPort)
	p.Out(DebugExitPort, 0)
	if err := m.LoadProgram(p.Bytes()); err != nil {
		t.Fatal(err)
	}
	c0, _ := m.Checkpoint(ctx)
	h0, _ := m.RAMHash(ctx)
	for range 3 {
		mustRun(t, m, 0)
		if err := m.LoadProgram(p.Bytes()); err != nil { // rewind RIP, keep state
			t.Fatal(err)
		}
	}
	if s := m.Scratch(); s.Value != 3 || s.Writes != 3 {
		t.Fatalf("scratch after 3 runs = %+v", s)
	}
	if err := m.Restore(ctx, c0); err != nil {
		t.Fatal(err)
	}
	if s := m.Scratch(); s != (ScratchState{}) {
		t.Errorf("scratch after restore = %+v, want zero", s)
	}
	if h, _ := m.RAMHash(ctx); h != h0 {
		t.Error("RAM differs after restore")
	}
	mustRun(t, m, 0)
	if s := m.Scratch(); s.Value != 1 || m.RAM()[DataAddr] != 0 {
		t.Errorf("after restore and one run: scratch %+v, RAM %d", s, m.RAM()[DataAddr])
	}
}

func TestHLTWithoutIRQChip(t *testing.T) {
	m := newVM(t, VMConfig{NoIRQChip: true})
	if err := m.LoadProgram(new(x86asm.Asm).DirtyPages(DataAddr, 2).Hlt().Bytes()); err != nil {
		t.Fatal(err)
	}
	c0, err := m.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e, err := m.Run(context.Background())
	if err != nil || e.Reason != ExitHLT {
		t.Fatalf("Run = %+v, %v; want HLT", e, err)
	}
	if err := m.Restore(context.Background(), c0); err != nil {
		t.Fatal(err)
	}
}

func TestBadGuests(t *testing.T) {
	tests := []struct {
		name    string
		prog    *x86asm.Asm
		timeout time.Duration
		reason  string
		want    error
		detail  string
	}{
		{"triple-fault-ud2", new(x86asm.Asm).Emit(0x0f, 0x0b), 0, "SHUTDOWN", ErrGuestFault, "triple fault"},
		{"triple-fault-noncanonical", new(x86asm.Asm).MovImm(x86asm.RAX, 0x8000000000000000).Emit(0xff, 0xe0), 0, "SHUTDOWN", ErrGuestFault, "triple fault"},
		// PVM emulates INT3 and fails at it; on hardware virtualization it triple-faults.
		{"int3", new(x86asm.Asm).Int3(), 0, "", ErrGuestFault, "at RIP"},
		{"unknown-port-out", new(x86asm.Asm).Out(0x3f8, 'x'), 0, "IO", ErrGuestFault, "unknown port 0x3f8"},
		{"unknown-port-in", new(x86asm.Asm).In(0x60), 0, "IO", ErrGuestFault, "unknown port 0x60"},
		{"mmio", new(x86asm.Asm).MovImm(x86asm.RDI, 0xd0000000).StoreRAXAtRDI(), 0, "MMIO", ErrGuestFault, "0xd0000000"},
		{"never-halts", new(x86asm.Asm).Spin(), 200 * time.Millisecond, "PAUSED", context.DeadlineExceeded, "deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := countFDs(t)
			m := newVM(t, VMConfig{})
			if err := m.LoadProgram(tc.prog.Bytes()); err != nil {
				t.Fatal(err)
			}
			c0, err := m.Checkpoint(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			_, err = m.Run(ctx)
			var ee *ExitError
			if !errors.As(err, &ee) || (tc.reason != "" && ee.Reason != tc.reason) || !errors.Is(err, tc.want) {
				t.Fatalf("Run error %v; want exit %s wrapping %v", err, tc.reason, tc.want)
			}
			if ee.RIP < CodeAddr || ee.RIP >= CodeAddr+uint64(len(tc.prog.Bytes()))+1 {
				t.Errorf("RIP %#x outside the program [%#x, +%d)", ee.RIP, CodeAddr, len(tc.prog.Bytes()))
			}
			if !strings.Contains(err.Error(), tc.detail) || !strings.Contains(err.Error(), "RIP 0x") {
				t.Errorf("error %q does not name %q and the RIP", err, tc.detail)
			}
			t.Logf("%v", err)
			// The machine survives: restore and run again to the same failure.
			if err := m.Restore(context.Background(), c0); err != nil {
				t.Fatalf("restore after %s: %v", tc.name, err)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := m.Run(context.Background()); !errors.Is(err, vmm.ErrClosed) {
				t.Errorf("Run after Close: %v", err)
			}
			if after := countFDs(t); after != before {
				t.Errorf("fds: %d before, %d after Close", before, after)
			}
		})
	}
}

func TestPause(t *testing.T) {
	m := newVM(t, VMConfig{})
	if err := m.LoadProgram(new(x86asm.Asm).Spin().Bytes()); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		if err := m.Pause(); err != nil {
			t.Error(err)
		}
	}()
	_, err := m.Run(context.Background())
	if !errors.Is(err, ErrPaused) {
		t.Fatalf("Run = %v, want ErrPaused", err)
	}
}

func TestMemoryLimits(t *testing.T) {
	kvmtest.Need(t)
	tests := []struct {
		bytes int64
		want  error
	}{
		{5 << 30, ErrTooLarge},
		{MaxMemory + PageSize, ErrTooLarge},
		{MinMemory - PageSize, nil},
		{MinMemory + 1, nil},
	}
	for _, tc := range tests {
		m, err := NewVM(VMConfig{MemoryBytes: tc.bytes})
		if err == nil {
			m.Close()
			t.Errorf("NewVM(%d bytes) succeeded", tc.bytes)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("NewVM(%d bytes) = %v, want %v", tc.bytes, err, tc.want)
		}
		t.Logf("%d bytes: %v", tc.bytes, err)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	kvmtest.Need(t)
	for _, mode := range dirtyModes {
		t.Run(mode.name, func(t *testing.T) {
			fds, maps := countFDs(t), countMaps(t)
			for range 3 {
				m, err := NewVM(mode.cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.LoadProgram(new(x86asm.Asm).DirtyPages(DataAddr, 4).Out(DebugExitPort, 0).Bytes()); err != nil {
					t.Fatal(err)
				}
				if _, err := m.Checkpoint(context.Background()); err != nil { // maps the shadow too
					t.Fatal(err)
				}
				mustRun(t, m, 0)
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if got := countFDs(t); got != fds {
				t.Errorf("fds: %d before, %d after", fds, got)
			}
			if got := countMaps(t); got > maps {
				t.Errorf("mappings: %d before, %d after", maps, got)
			}
		})
	}
}

func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func countMaps(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		// Only ours: the memfd, kvm_run/ring (anon_inode:kvm-vcpu) and the
		// shadow are distinguishable by name or size; count the named ones.
		if strings.Contains(l, "themis-guest-ram") || strings.Contains(l, "kvm-vcpu") {
			n++
		}
	}
	return n
}

// TestPITSpeakerPort: port 0x61 (system control port B) belongs to the
// in-kernel PIT. A booting Linux kernel sets the channel 2 gate there and
// reads it back while calibrating its timers; without
// KVM_PIT_SPEAKER_DUMMY the access reached us and stopped the boot.
func TestPITSpeakerPort(t *testing.T) {
	m := newVM(t, VMConfig{})
	const port = 0x61
	readTo := func(a *x86asm.Asm, addr uint64) *x86asm.Asm {
		a.MovImm(x86asm.RDI, addr)
		return a.Emit(0xba).Imm32(port).Emit(0xec, 0x88, 0x07) // mov edx, 0x61; in al, dx; mov [rdi], al
	}
	a := new(x86asm.Asm).Outb(port, 0x01) // channel 2 gate on, speaker off
	readTo(a, DataAddr)
	a.Outb(port, 0x00)
	readTo(a, DataAddr+1)
	if err := m.LoadProgram(a.Out(DebugExitPort, 7).Bytes()); err != nil {
		t.Fatal(err)
	}
	mustRun(t, m, 7)
	got := m.RAM()[DataAddr : DataAddr+2]
	if got[0]&1 != 1 || got[1]&1 != 0 {
		t.Errorf("port 0x61 read %#02x after gate on, %#02x after gate off: want bit 0 set, then clear", got[0], got[1])
	}
}

// TestRestoreFlushesGuestTLB: a restore puts page tables back from beneath
// the guest, so translations the guest cached since the checkpoint must
// not survive it. The guest maps X to page A and reads it (checkpoint),
// remaps X to page B with invlpg and reads it, and after a restore reads X
// again: it must see A. On hardware virtualization the stale entry lived
// in the TLB (tagged by the guest's ASID) and the Linux guest triple-faulted
// after some dozens of restores.
func TestRestoreFlushesGuestTLB(t *testing.T) {
	m := newVM(t, VMConfig{})
	const (
		x     = 0x800000 // 2 MiB page 4: identity-mapped to A at first
		pageA = 0x800000
		pageB = 0xa00000
		pd4   = PML4Addr + 0x2000 + 8*4 // the page-directory entry for x
		res   = DataAddr
		flag  = DataAddr + 8
	)
	abs := func(op []byte, addr uint32) []byte { return binary.LittleEndian.AppendUint32(op, addr) }
	a := new(x86asm.Asm)
	start := len(a.Bytes())
	a.Emit(abs([]byte{0x48, 0x8b, 0x04, 0x25}, x)...)   // mov rax, [x]
	a.Emit(abs([]byte{0x48, 0x89, 0x04, 0x25}, res)...) // mov [res], rax
	a.Out(DebugExitPort, 1)
	a.Emit(abs([]byte{0x48, 0x8b, 0x0c, 0x25}, flag)...) // mov rcx, [flag]
	a.Emit(0x48, 0x85, 0xc9)                             // test rcx, rcx
	a.Emit(0x0f, 0x84).Imm32(uint32(int32(start - (len(a.Bytes()) + 4))))
	a.Emit(abs([]byte{0x48, 0xc7, 0x04, 0x25}, pd4)...).Imm32(pageB | 0x83) // mov qword [pd4], B|PS|RW|P
	a.Emit(abs([]byte{0x0f, 0x01, 0x3c, 0x25}, x)...)                       // invlpg [x]
	a.Emit(abs([]byte{0x48, 0x8b, 0x04, 0x25}, x)...)                       // mov rax, [x]
	a.Emit(abs([]byte{0x48, 0x89, 0x04, 0x25}, res)...)                     // mov [res], rax
	a.Out(DebugExitPort, 2)
	a.Emit(0xe9).Imm32(uint32(int32(start - (len(a.Bytes()) + 4)))) // jmp start
	if err := m.LoadProgram(a.Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		addr uint64
		fill byte
	}{{pageA, 'A'}, {pageB, 'B'}} {
		if err := m.WriteRAM(w.addr, bytes.Repeat([]byte{w.fill}, 8)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() byte { return m.RAM()[res] }
	mustRun(t, m, 1)
	if got := read(); got != 'A' {
		t.Fatalf("first read of x: %q, want 'A'", got)
	}
	ctx := context.Background()
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		if err := m.WriteRAM(flag, []byte{1}); err != nil {
			t.Fatal(err)
		}
		mustRun(t, m, 2)
		if got := read(); got != 'B' {
			t.Fatalf("round %d: read of x after remapping it: %q, want 'B'", round, got)
		}
		if err := m.Restore(ctx, c0); err != nil {
			t.Fatal(err)
		}
		mustRun(t, m, 1)
		if got := read(); got != 'A' {
			t.Fatalf("round %d: read of x after the restore: %q, want 'A' (a translation from the discarded branch survived)", round, got)
		}
	}
}
