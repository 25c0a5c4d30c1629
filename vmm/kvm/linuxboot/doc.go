// Package linuxboot loads an x86-64 Linux bzImage into guest RAM for the Go
// VMM on /dev/kvm, following the kernel's 64-bit boot protocol
// (Documentation/arch/x86/boot.rst, "64-bit Boot Protocol";
// struct boot_params and struct setup_header in
// arch/x86/include/uapi/asm/bootparam.h).
//
// It is pure: ParseHeader reads a bzImage's setup header and Load writes the
// kernel, its boot parameters, command line and initrd into a []byte that is
// guest RAM at guest-physical 0. No ioctls, no files, no cgo, no unsafe. The
// caller owns mem and the vCPU: it identity-maps 0-4 GiB, loads a GDT,
// enters 64-bit long mode with interrupts disabled and sets RIP=Layout.Entry
// and RSI=Layout.BootParams. boot.rst asks for flat descriptors at
// selectors 0x10 (__BOOT_CS) and 0x18 (__BOOT_DS); the 6.1 decompressor
// zeroes the data segment registers and loads its own GDT before it relies
// on segments, but a GDT laid out that way follows the letter.
//
// Guest-physical layout written by Load (E820 types in brackets):
//
//	[0x000000, 0x09fc00)  RAM       low memory
//	  0x000500-0x000600   -         left to the VMM: GDT (Load never writes it)
//	  0x007000-0x008000   written   zero page (struct boot_params), ZeroPageAddr
//	  0x020000-0x026000   -         left to the VMM: page tables (PML4, PDPT, 4 PDs)
//	  0x030000-0x040000   written   command line, NUL-terminated, CmdlineAddr
//	[0x09fc00, 0x0a0000)  reserved  EBDA
//	[0x0f0000, 0x100000)  reserved  BIOS ROM
//	[0x100000, len(mem))  RAM
//	  0x100000-KernelEnd  written   protected-mode kernel (bytes after the
//	                                real-mode setup), KernelAddr; the 64-bit
//	                                entry point is KernelAddr+0x200
//	  DecompressAddr-     clobbered where the kernel relocates and decompresses
//	  DecompressEnd                 itself: init_size bytes from pref_address
//	                                (16 MiB for distribution kernels), or from
//	                                KernelAddr rounded up to kernel_alignment if
//	                                that is higher and the kernel is relocatable
//	  InitrdAddr-         written   initrd, page-aligned, as high as possible
//	  +InitrdSize                   below min(initrd_addr_max+1, len(mem)) and
//	                                above max(KernelEnd, DecompressEnd)
//
// Everything Load writes lies in E820 RAM and nothing overlaps: it checks
// that and returns an error rather than writing. It validates every field
// and offset it reads from the kernel file, which is untrusted input: no
// input makes it panic, and on error mem is left unchanged. Guest RAM must be
// at least DecompressEnd bytes (about 68 MiB for Debian's 6.1 cloud kernel)
// and at most MaxMemory, so that the E820 map stays below the 32-bit MMIO
// hole.
//
// Also worth knowing for the caller: while it decompresses, the kernel
// borrows the two pages below the EBDA (0x9d000-0x9f000) as a trampoline and
// restores them; it reads the BIOS data area at 0x40e and 0x413, which reads
// as zero in fresh RAM.
//
// Not supported: ELF vmlinux images and the PVH entry (XEN_ELFNOTE_PHYS32_ENTRY),
// the 32-bit protected-mode entry (code32_start), the 16-bit real-mode
// entry through the setup code, zImages (LOADED_HIGH clear), boot
// protocols before 2.12 (no xloadflags, so no XLF_KERNEL_64), the EFI
// handover protocol, setup_data chains (setup_data is set to 0), loading
// the kernel at pref_address or above 4 GiB, and an initrd above 4 GiB.
//
// Concurrency: ParseHeader and Load keep no state; Load writes only into the
// mem it is given, so concurrent Loads into different mems are safe.
//
// This package must not import other themis packages: the kvm backend
// imports it.
package linuxboot
