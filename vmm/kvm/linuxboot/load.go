package linuxboot

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Guest-physical layout (see the package comment). All addresses are
// guest-physical byte addresses, i.e. offsets into mem.
const (
	// ZeroPageAddr is where Load writes struct boot_params (the zero page).
	ZeroPageAddr = 0x7000
	// ZeroPageSize is the size of struct boot_params in bytes.
	ZeroPageSize = 0x1000
	// CmdlineAddr is where Load writes the NUL-terminated command line.
	CmdlineAddr = 0x30000
	// MaxCmdline is the room at CmdlineAddr in bytes, terminating NUL
	// included.
	MaxCmdline = 0x10000
	// KernelAddr is where Load copies the protected-mode kernel.
	KernelAddr = 0x100000
	// EntryOffset is the 64-bit entry point's offset from KernelAddr.
	EntryOffset = 0x200
	// GDTStart and GDTEnd bound the region left to the VMM for its GDT;
	// Load never writes there.
	GDTStart, GDTEnd = 0x500, 0x600
	// PageTablesStart and PageTablesEnd bound the region left to the VMM
	// for its page tables (PML4, PDPT and four page directories of 2 MiB
	// pages identity-mapping 0-4 GiB); Load never writes there.
	PageTablesStart, PageTablesEnd = 0x20000, 0x26000
	// MaxMemory is the largest guest RAM Load accepts, in bytes: RAM above
	// it would overlap the 32-bit MMIO hole (IOAPIC, LAPIC) in the E820 map.
	MaxMemory = 3 << 30
	// PageSize is the alignment of the initrd in bytes.
	PageSize = 4096
)

// Values Load writes into the zero page.
const (
	// LoaderType is type_of_loader: 0xff, a boot loader without an
	// assigned ID.
	LoaderType = 0xff
	// HeapEndPtr is heap_end_ptr, the end of the real-mode setup heap
	// relative to the start of the setup code.
	HeapEndPtr = 0xfe00
	// VidModeNormal is vid_mode 0xffff, "normal" (80x25 text).
	VidModeNormal = 0xffff
)

// E820 memory types.
const (
	// E820RAM is usable RAM.
	E820RAM = 1
	// E820Reserved is memory the guest must not use.
	E820Reserved = 2
	// MaxE820Entries is the capacity of boot_params.e820_table.
	MaxE820Entries = 128
)

// The legacy holes in the E820 map Load writes.
const (
	ebdaStart, ebdaEnd = 0x9fc00, 0xa0000
	biosStart, biosEnd = 0xf0000, 0x100000
)

// Offsets of struct boot_params fields outside the setup header.
const (
	offExtRamdiskImage = 0x0c0
	offExtRamdiskSize  = 0x0c4
	offExtCmdLinePtr   = 0x0c8
	offE820Entries     = 0x1e8
	// offHeaderAreaEnd is edd_mbr_sig_buffer, the first boot_params field
	// after the room for the setup header; the header copy stops there.
	offHeaderAreaEnd = 0x290
	offE820Table     = 0x2d0
	e820EntrySize    = 20 // struct boot_e820_entry, packed
)

// Params is what Load boots.
type Params struct {
	// Kernel is the bzImage file's contents. It is untrusted input.
	Kernel []byte
	// Initrd is the initial ramdisk; it may be empty.
	Initrd []byte
	// Cmdline is the kernel command line, without a NUL.
	Cmdline string
}

// E820Entry is one range of the guest's E820 memory map.
type E820Entry struct {
	// Addr is the start address in bytes.
	Addr uint64
	// Size is the length in bytes.
	Size uint64
	// Type is E820RAM or E820Reserved.
	Type uint32
}

// Layout says where Load put things. The caller identity-maps 0-4 GiB
// (page tables in [PageTablesStart, PageTablesEnd)), loads a GDT (in
// [GDTStart, GDTEnd)), enters 64-bit long mode with interrupts disabled
// and sets RIP=Entry and RSI=BootParams.
type Layout struct {
	// Header is the kernel's parsed setup header.
	Header *Header
	// KernelAddr is where the protected-mode kernel was copied.
	KernelAddr uint64
	// KernelEnd is KernelAddr + max(protected-mode size, InitSize).
	KernelEnd uint64
	// Entry is the 64-bit entry point, KernelAddr + EntryOffset.
	Entry uint64
	// BootParams is the address of the zero page (struct boot_params).
	BootParams uint64
	// CmdlineAddr is the address of the NUL-terminated command line.
	CmdlineAddr uint64
	// InitrdAddr and InitrdSize locate the initrd in bytes; both are 0
	// without one.
	InitrdAddr, InitrdSize uint64
	// DecompressAddr and DecompressEnd bound the memory the kernel
	// overwrites while it relocates and decompresses itself: InitSize bytes
	// from its run-time address (see the package comment). It may overlap
	// [KernelAddr, KernelEnd) but nothing else Load wrote.
	DecompressAddr, DecompressEnd uint64
	// E820 is the memory map written to the zero page.
	E820 []E820Entry
}

// Load writes the bzImage p.Kernel, its zero page, command line and initrd
// into mem, which is guest RAM at guest-physical 0, and says where they are.
// It validates everything first and writes nothing on error; errors wrap
// ErrNotBzImage, ErrUnsupported, ErrTooSmall or ErrInvalidCmdline. Load
// writes only the zero page, the command line and its NUL, the
// protected-mode kernel and the initrd; in particular it never writes the
// GDT or page-table regions, nor the kernel's memory beyond the copied
// image (fresh guest RAM is zero).
func Load(mem []byte, p Params) (*Layout, error) {
	h, err := ParseHeader(p.Kernel)
	if err != nil {
		return nil, err
	}
	pm := p.Kernel[h.SetupBytes:]
	l, err := plan(h, uint64(len(pm)), uint64(len(mem)), uint64(len(p.Initrd)), p.Cmdline)
	if err != nil {
		return nil, err
	}

	zp := mem[ZeroPageAddr : ZeroPageAddr+ZeroPageSize]
	clear(zp)
	// boot.rst: copy the setup header, from 0x1f1 to 0x202 + the byte at
	// 0x201, into a zeroed boot_params. ParseHeader checked it reaches past
	// init_size; keep it inside boot_params' room for the header.
	end := min(headerEnd(p.Kernel), offHeaderAreaEnd, len(p.Kernel))
	copy(zp[offSetupSects:end], p.Kernel[offSetupSects:end])

	le := binary.LittleEndian
	le.PutUint16(zp[offVidMode:], VidModeNormal)
	zp[offTypeOfLoader] = LoaderType
	zp[offLoadFlags] |= CanUseHeap // LOADED_HIGH stays set: ParseHeader requires it
	le.PutUint16(zp[offHeapEndPtr:], HeapEndPtr)
	le.PutUint32(zp[offCmdLinePtr:], uint32(l.CmdlineAddr))
	le.PutUint32(zp[offExtCmdLinePtr:], uint32(l.CmdlineAddr>>32))
	le.PutUint32(zp[offRamdiskImage:], uint32(l.InitrdAddr))
	le.PutUint32(zp[offExtRamdiskImage:], uint32(l.InitrdAddr>>32))
	le.PutUint32(zp[offRamdiskSize:], uint32(l.InitrdSize))
	le.PutUint32(zp[offExtRamdiskSize:], uint32(l.InitrdSize>>32))
	le.PutUint64(zp[offSetupData:], 0) // no setup_data chain, whatever the file says
	zp[offE820Entries] = uint8(len(l.E820))
	for i, e := range l.E820 {
		b := zp[offE820Table+i*e820EntrySize:]
		le.PutUint64(b[0:], e.Addr)
		le.PutUint64(b[8:], e.Size)
		le.PutUint32(b[16:], e.Type)
	}

	n := copy(mem[l.CmdlineAddr:], p.Cmdline)
	mem[l.CmdlineAddr+uint64(n)] = 0
	copy(mem[l.KernelAddr:], pm)
	copy(mem[l.InitrdAddr:], p.Initrd)
	return l, nil
}

// plan computes the layout for a kernel with header h and a protected-mode
// part of pmSize bytes in memSize bytes of RAM, and checks it. It writes
// nothing.
func plan(h *Header, pmSize, memSize, initrdSize uint64, cmdline string) (*Layout, error) {
	if i := strings.IndexByte(cmdline, 0); i >= 0 {
		return nil, fmt.Errorf("%w: NUL byte at offset %d", ErrInvalidCmdline, i)
	}
	if uint64(len(cmdline)) > uint64(h.CmdlineSize) {
		return nil, fmt.Errorf("%w: %d bytes, longer than the kernel's cmdline_size of %d",
			ErrInvalidCmdline, len(cmdline), h.CmdlineSize)
	}
	if len(cmdline)+1 > MaxCmdline {
		return nil, fmt.Errorf("%w: %d bytes and a NUL do not fit the %d bytes at %#x",
			ErrInvalidCmdline, len(cmdline), MaxCmdline, CmdlineAddr)
	}
	if memSize > MaxMemory {
		return nil, fmt.Errorf("%w: guest RAM of %s is above the %s limit (the 32-bit MMIO hole)",
			ErrUnsupported, mib(memSize), mib(MaxMemory))
	}

	l := &Layout{
		Header:      h,
		KernelAddr:  KernelAddr,
		KernelEnd:   KernelAddr + max(pmSize, uint64(h.InitSize)),
		Entry:       KernelAddr + EntryOffset,
		BootParams:  ZeroPageAddr,
		CmdlineAddr: CmdlineAddr,
		E820:        e820Map(memSize),
	}
	if l.KernelEnd > memSize {
		return nil, fmt.Errorf("%w: %s of RAM, but the kernel needs up to %s (%s loaded at %s, init_size %s)",
			ErrTooSmall, mib(memSize), mib(l.KernelEnd), mib(pmSize), mib(KernelAddr), mib(uint64(h.InitSize)))
	}
	l.DecompressAddr = h.decompressAddr(KernelAddr)
	if l.DecompressAddr < KernelAddr {
		return nil, fmt.Errorf("%w: the kernel would decompress itself at %#x (pref_address), below %#x",
			ErrUnsupported, l.DecompressAddr, KernelAddr)
	}
	if l.DecompressAddr > memSize || memSize-l.DecompressAddr < uint64(h.InitSize) {
		return nil, fmt.Errorf("%w: %s of RAM, but the kernel decompresses itself into %s from %s and needs up to %s",
			ErrTooSmall, mib(memSize), mib(uint64(h.InitSize)), mib(l.DecompressAddr), mibSum(l.DecompressAddr, uint64(h.InitSize)))
	}
	l.DecompressEnd = l.DecompressAddr + uint64(h.InitSize)

	if initrdSize > 0 {
		low := alignUp(max(l.KernelEnd, l.DecompressEnd), PageSize) // <= MaxMemory: no overflow
		high := min(uint64(h.InitrdAddrMax)+1, memSize)
		if initrdSize > high || alignDown(high-initrdSize, PageSize) < low {
			return nil, fmt.Errorf("%w: the initrd of %s does not fit between the kernel's end at %s and %s (the lower of initrd_addr_max+1 and %s of RAM)",
				ErrTooSmall, mib(initrdSize), mib(low), mib(high), mib(memSize))
		}
		l.InitrdAddr = alignDown(high-initrdSize, PageSize)
		l.InitrdSize = initrdSize
	}
	if err := l.check(memSize, uint64(len(cmdline))+1); err != nil {
		return nil, err
	}
	return l, nil
}

// decompressAddr is where the kernel, loaded at load, relocates and
// decompresses itself (arch/x86/boot/compressed/head_64.S, startup_64):
// the load address rounded up to kernel_alignment if the kernel is
// relocatable and that is at least LOAD_PHYSICAL_ADDR, else
// LOAD_PHYSICAL_ADDR, which the setup header gives as pref_address.
func (h *Header) decompressAddr(load uint64) uint64 {
	if h.RelocatableKernel && h.KernelAlignment != 0 {
		mask := uint64(h.KernelAlignment - 1)
		if a := (load + mask) &^ mask; a >= h.PrefAddress {
			return a
		}
	}
	return h.PrefAddress
}

// e820Map is the memory map for memSize bytes of RAM: low memory, the EBDA
// and BIOS holes, and RAM from 1 MiB to memSize if there is any.
func e820Map(memSize uint64) []E820Entry {
	m := []E820Entry{
		{Addr: 0, Size: ebdaStart, Type: E820RAM},
		{Addr: ebdaStart, Size: ebdaEnd - ebdaStart, Type: E820Reserved},
		{Addr: biosStart, Size: biosEnd - biosStart, Type: E820Reserved},
	}
	if memSize > biosEnd {
		m = append(m, E820Entry{Addr: biosEnd, Size: memSize - biosEnd, Type: E820RAM})
	}
	return m
}

// region is a named range [start, end) of guest-physical memory.
type region struct {
	name       string
	start, end uint64
}

// overlaps reports whether r and o share a byte.
func (r region) overlaps(o region) bool {
	return r.start < r.end && o.start < o.end && r.start < o.end && o.start < r.end
}

func (r region) String() string { return fmt.Sprintf("%s [%#x, %#x)", r.name, r.start, r.end) }

// check verifies the invariants Load relies on: everything it writes, and
// the kernel's decompression area, lies inside one E820 RAM range of
// memSize bytes of RAM, and none of them overlap each other or the VMM's
// regions, except that the kernel decompresses over its own image.
// plan's checks make a failure here a bug in this package, but Load checks
// rather than writes out of place.
func (l *Layout) check(memSize, cmdlineBytes uint64) error {
	written := []region{
		{"zero page", l.BootParams, l.BootParams + ZeroPageSize},
		{"command line", l.CmdlineAddr, l.CmdlineAddr + cmdlineBytes},
		{"kernel", l.KernelAddr, l.KernelEnd},
	}
	if l.InitrdSize > 0 {
		written = append(written, region{"initrd", l.InitrdAddr, l.InitrdAddr + l.InitrdSize})
	}
	decompress := region{"kernel decompression area", l.DecompressAddr, l.DecompressEnd}
	vmm := []region{
		{"GDT", GDTStart, GDTEnd},
		{"page tables", PageTablesStart, PageTablesEnd},
	}
	if len(l.E820) > MaxE820Entries {
		return fmt.Errorf("linuxboot: internal error: %d E820 entries, more than %d", len(l.E820), MaxE820Entries)
	}
	for _, r := range slices.Concat(written, []region{decompress}) {
		if r.end > memSize || !inRAM(l.E820, r) {
			return fmt.Errorf("linuxboot: internal error: %v is not inside one E820 RAM range of %s of RAM", r, mib(memSize))
		}
	}
	// Pairs that must not overlap: any two written regions, a written
	// region and a VMM region, the decompression area and anything but the
	// kernel image.
	for i, r := range written {
		others := slices.Concat(written[i+1:], vmm)
		if r.name != "kernel" {
			others = append(others, decompress)
		}
		for _, o := range others {
			if r.overlaps(o) {
				return fmt.Errorf("linuxboot: internal error: %v overlaps %v", r, o)
			}
		}
	}
	for _, o := range vmm {
		if decompress.overlaps(o) {
			return fmt.Errorf("linuxboot: internal error: %v overlaps %v", decompress, o)
		}
	}
	return nil
}

// inRAM reports whether r is empty or lies inside one E820RAM entry of m.
func inRAM(m []E820Entry, r region) bool {
	if r.start >= r.end {
		return r.start == r.end
	}
	for _, e := range m {
		if e.Type == E820RAM && r.start >= e.Addr && r.end <= e.Addr+e.Size {
			return true
		}
	}
	return false
}

func alignUp(x, a uint64) uint64   { return (x + a - 1) &^ (a - 1) }
func alignDown(x, a uint64) uint64 { return x &^ (a - 1) }

// mib formats a byte count in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// mibSum formats a+b in MiB without overflowing uint64.
func mibSum(a, b uint64) string {
	return fmt.Sprintf("%.1f MiB", (float64(a)+float64(b))/(1<<20))
}
