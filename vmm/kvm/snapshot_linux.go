package kvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/vmm"
)

// Snapshot sections (fork's container: magic, format version, named
// sections, blake3 trailer). The machine section says what the snapshot
// needs from the machine that loads it; RAM is stored sparse (only the
// populated ranges of the memfd).
const (
	secMachine = "kvm.machine" // snapMachine
	secRAM     = "kvm.ram"     // u32 count, then per range: u64 offset, u64 length, bytes
	secVCPU    = "kvm.vcpu"    // vcpuState, MSRs as u32 count + entries
	secVM      = "kvm.vm"      // vmState
	secScratch = "kvm.scratch" // ScratchState
)

// snapMachine is the machine section.
type snapMachine struct {
	MemoryBytes uint64
	IRQChip     uint8
	XSAVE       uint8
	XCRS        uint8
	Clock       uint8
}

// MaxSnapshot bounds the snapshot files LoadSnapshot reads: the largest RAM
// plus 64 MiB of state.
const MaxSnapshot = MaxMemory + 64<<20

// SaveSnapshot writes the machine's current state (RAM, vCPU, in-kernel
// devices, scratch device) to w as a self-contained snapshot file. The
// machine must not be running (call it between Runs; Pause a Run first).
// Synthetic guests only: a Linux machine's attached devices and disks are
// not part of the file.
func (m *VM) SaveSnapshot(ctx context.Context, w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	if m.att != nil {
		return fmt.Errorf("kvm: save snapshot: %w: attached devices and disks are not saved to files", errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	vs, err := m.saveVCPU()
	if err != nil {
		return fmt.Errorf("kvm: save snapshot: %w", err)
	}
	vms, err := m.saveVM()
	if err != nil {
		return fmt.Errorf("kvm: save snapshot: %w", err)
	}
	ranges, err := m.populated()
	if err != nil {
		return fmt.Errorf("kvm: save snapshot: %w", err)
	}
	b2u := func(b bool) uint8 {
		if b {
			return 1
		}
		return 0
	}
	var sections []fork.Section
	add := func(name string, v ...any) error {
		var buf bytes.Buffer
		for _, x := range v {
			if err := binary.Write(&buf, binary.LittleEndian, x); err != nil {
				return fmt.Errorf("kvm: save snapshot: encode %s: %w", name, err)
			}
		}
		sections = append(sections, fork.Section{Name: name, Data: buf.Bytes()})
		return nil
	}
	if err := add(secMachine, snapMachine{uint64(len(m.mem)), b2u(m.irqchip()), b2u(m.hasXSAVE), b2u(m.hasXCRS), b2u(m.hasClock)}); err != nil {
		return err
	}
	var ram bytes.Buffer
	ram.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(ranges))))
	for _, r := range ranges {
		ram.Write(binary.LittleEndian.AppendUint64(nil, uint64(r.Off)))
		ram.Write(binary.LittleEndian.AppendUint64(nil, uint64(r.Len)))
		ram.Write(m.mem[r.Off : r.Off+r.Len])
	}
	sections = append(sections, fork.Section{Name: secRAM, Data: ram.Bytes()})
	if err := add(secVCPU, vs.Regs, vs.Sregs, vs.FPU, vs.XSAVE, vs.XCRS, vs.LAPIC, vs.Events, vs.DebugRegs, vs.MPState,
		uint32(len(vs.MSRs)), vs.MSRs); err != nil {
		return err
	}
	if err := add(secVM, vms); err != nil {
		return err
	}
	if err := add(secScratch, m.scratch); err != nil {
		return err
	}
	if err := fork.Encode(w, sections); err != nil {
		return fmt.Errorf("kvm: save snapshot: %w", err)
	}
	return nil
}

// LoadSnapshot creates a machine from a snapshot file written by
// SaveSnapshot: same RAM size and irqchip choice, its RAM, vCPU and device
// state. cfg's MemoryBytes and NoIRQChip must be zero or match the file.
// The file is untrusted: its size is capped, its checksum and every length
// checked, and errors wrap fork.ErrCorrupt / fork.ErrIncompatibleFormat /
// fork.ErrTooLarge.
func LoadSnapshot(r io.Reader, cfg VMConfig) (*VM, error) {
	secs, err := fork.Decode(r, MaxSnapshot)
	if err != nil {
		return nil, fmt.Errorf("kvm: load snapshot: %w", err)
	}
	get := func(name string) ([]byte, error) {
		b, ok := fork.Find(secs, name)
		if !ok {
			return nil, fmt.Errorf("kvm: load snapshot: %w: no %s section", fork.ErrCorrupt, name)
		}
		return b, nil
	}
	read := func(name string, b []byte, v ...any) error {
		rd := bytes.NewReader(b)
		for _, x := range v {
			if err := binary.Read(rd, binary.LittleEndian, x); err != nil {
				return fmt.Errorf("kvm: load snapshot: %w: section %s: %v", fork.ErrCorrupt, name, err)
			}
		}
		return nil
	}
	mb, err := get(secMachine)
	if err != nil {
		return nil, err
	}
	var sm snapMachine
	if err := read(secMachine, mb, &sm); err != nil {
		return nil, err
	}
	if sm.MemoryBytes > MaxMemory {
		return nil, fmt.Errorf("kvm: load snapshot: %w: RAM of %d bytes, at most %d", fork.ErrCorrupt, sm.MemoryBytes, int64(MaxMemory))
	}
	switch {
	case cfg.MemoryBytes != 0 && uint64(cfg.MemoryBytes) != sm.MemoryBytes:
		return nil, fmt.Errorf("kvm: load snapshot: config asks for %d bytes of RAM, the snapshot has %d", cfg.MemoryBytes, sm.MemoryBytes)
	case cfg.NoIRQChip && sm.IRQChip == 1:
		return nil, errors.New("kvm: load snapshot: config has NoIRQChip, the snapshot has the in-kernel irqchip")
	}
	cfg.MemoryBytes = int64(sm.MemoryBytes)
	cfg.NoIRQChip = sm.IRQChip == 0
	var vs vcpuState
	vb, err := get(secVCPU)
	if err != nil {
		return nil, err
	}
	var nMSR uint32
	if err := read(secVCPU, vb, &vs.Regs, &vs.Sregs, &vs.FPU, &vs.XSAVE, &vs.XCRS, &vs.LAPIC, &vs.Events, &vs.DebugRegs, &vs.MPState, &nMSR); err != nil {
		return nil, err
	}
	fixed := binary.Size(vs.Regs) + binary.Size(vs.Sregs) + binary.Size(vs.FPU) + binary.Size(vs.XSAVE) + binary.Size(vs.XCRS) +
		binary.Size(vs.LAPIC) + binary.Size(vs.Events) + binary.Size(vs.DebugRegs) + binary.Size(vs.MPState) + 4
	if want := fixed + int(nMSR)*binary.Size(MSR{}); nMSR > 256 || len(vb) != want {
		return nil, fmt.Errorf("kvm: load snapshot: %w: vcpu section of %d bytes with %d MSRs", fork.ErrCorrupt, len(vb), nMSR)
	}
	vs.MSRs = make([]MSR, nMSR)
	if err := read(secVCPU, vb[fixed:], vs.MSRs); err != nil {
		return nil, err
	}
	var vms vmState
	b, err := get(secVM)
	if err != nil {
		return nil, err
	}
	if err := read(secVM, b, &vms); err != nil {
		return nil, err
	}
	var scratch ScratchState
	if b, err = get(secScratch); err != nil {
		return nil, err
	}
	if err := read(secScratch, b, &scratch); err != nil {
		return nil, err
	}
	ram, err := get(secRAM)
	if err != nil {
		return nil, err
	}
	m, err := NewVM(cfg)
	if err != nil {
		return nil, err
	}
	if err := m.loadSnapshot(ram, &vs, &vms, scratch, sm); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

func (m *VM) loadSnapshot(ram []byte, vs *vcpuState, vms *vmState, scratch ScratchState, sm snapMachine) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if (sm.XSAVE == 1) != m.hasXSAVE || (sm.XCRS == 1) != m.hasXCRS || (sm.Clock == 1) != m.hasClock {
		return fmt.Errorf("kvm: load snapshot: %w: saved on a host with XSAVE=%d XCRS=%d clock=%d, this one has %v %v %v",
			fork.ErrIncompatibleFormat, sm.XSAVE, sm.XCRS, sm.Clock, m.hasXSAVE, m.hasXCRS, m.hasClock)
	}
	clear(m.mem[:min(len(m.mem), 1<<20)]) // New wrote page tables and a GDT there
	if err := parseRAMSection(ram, uint64(len(m.mem)), func(off uint64, b []byte) { copy(m.mem[off:], b) }); err != nil {
		return err
	}
	if err := m.loadVCPU(vs); err != nil {
		return fmt.Errorf("kvm: load snapshot: %w", err)
	}
	if err := m.loadVM(vms); err != nil {
		return fmt.Errorf("kvm: load snapshot: %w", err)
	}
	m.scratch = scratch
	return nil
}
