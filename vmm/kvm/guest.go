package kvm

import "encoding/binary"

// Synthetic-guest layout in guest-physical memory (identity-mapped, so these
// are also the guest-virtual addresses). The guest runs in 64-bit long mode
// at CPL0 from the first instruction: New writes the GDT and page tables,
// LoadProgram the code, and the vCPU's sregs enter long mode directly.
const (
	// GDTAddr holds the GDT: null, code64 (0x08), data (0x10), data (0x18).
	GDTAddr = 0x500
	// CodeAddr is where LoadProgram places code and where RIP starts.
	CodeAddr = 0x1000
	// MaxCode is the largest program LoadProgram accepts, in bytes.
	MaxCode = 0xf000
	// StackTop is the initial RSP; the stack grows down towards CodeAddr+MaxCode.
	StackTop = 0x20000
	// PML4Addr is the root page table (CR3); the PDPT and four page
	// directories of 2 MiB pages follow it, identity-mapping 0-4 GiB.
	PML4Addr = 0x20000
	// DataAddr is the first byte free for the guest program's data.
	DataAddr = 0x100000
	// MinMemory is the smallest guest RAM New accepts.
	MinMemory = 2 << 20
	// MaxMemory is the largest guest RAM New accepts: one memslot at
	// guest-physical 0 must stay below the 32-bit MMIO hole (LAPIC, IOAPIC).
	MaxMemory = 3 << 30
	// PageSize is the dirty-tracking granularity.
	PageSize = 4096
)

// Ports the synthetic guest can use.
const (
	// ScratchPort is the scratch register device: OUT stores a value and
	// counts the write, IN reads the value. Its state is part of a checkpoint.
	ScratchPort = 0x10
	// DebugExitPort ends Run: an OUT there returns ExitDebug with the value as Code.
	DebugExitPort = 0xf4
)

// gdt entries: null, 64-bit code, two flat data segments.
var gdt = []uint64{0, 0x00af9b000000ffff, 0x00cf93000000ffff, 0x00cf93000000ffff}

// buildPageTables writes the GDT and the identity map of 0-4 GiB
// (2 MiB pages) into mem.
func buildPageTables(mem []byte) {
	for i, d := range gdt {
		binary.LittleEndian.PutUint64(mem[GDTAddr+8*i:], d)
	}
	const present, rw, ps = 1, 2, 0x80
	pdpt := uint64(PML4Addr + 0x1000)
	clear(mem[PML4Addr : PML4Addr+6*0x1000])
	binary.LittleEndian.PutUint64(mem[PML4Addr:], pdpt|present|rw)
	for i := range uint64(4) {
		pd := pdpt + 0x1000*(1+i)
		binary.LittleEndian.PutUint64(mem[pdpt+8*i:], pd|present|rw)
		for j := range uint64(512) {
			binary.LittleEndian.PutUint64(mem[pd+8*j:], (i<<30|j<<21)|present|rw|ps)
		}
	}
}

// longMode returns s changed to flat 64-bit long mode at CPL0 with paging on.
func longMode(s Sregs) Sregs {
	code := Segment{Limit: 0xffffffff, Selector: 0x08, Type: 11, Present: 1, S: 1, L: 1, G: 1}
	data := Segment{Limit: 0xffffffff, Selector: 0x10, Type: 3, Present: 1, DB: 1, S: 1, G: 1}
	s.CS = code
	s.DS, s.ES, s.FS, s.GS, s.SS = data, data, data, data, data
	s.GDT = DTable{Base: GDTAddr, Limit: uint16(8*len(gdt) - 1)}
	s.IDT = DTable{}   // no IDT: any exception triple-faults
	s.CR0 = 0x80050033 // PG AM WP NE ET MP PE
	s.CR3 = PML4Addr
	s.CR4 = 0x620  // OSXMMEXCPT OSFXSR PAE
	s.EFER = 0x500 // LMA LME
	return s
}

// ScratchState is the scratch device's state.
type ScratchState struct {
	// Value is the last value written.
	Value uint32
	// Writes counts OUTs to the port.
	Writes uint64
}
