package linuxboot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors. Every error from ParseHeader and Load wraps one of them.
var (
	// ErrNotBzImage: the kernel file is not a bzImage (no "HdrS" magic at
	// 0x202, too short, or a setup_sects that leaves no protected-mode
	// kernel). The message says what it looks like instead (ELF vmlinux,
	// PE/EFI image).
	ErrNotBzImage = errors.New("linuxboot: not a bzImage")
	// ErrUnsupported: a bzImage this loader cannot boot (boot protocol
	// before 2.12, no 64-bit entry point, not loaded high, a
	// kernel_alignment that is not a power of two, a decompression address
	// below 1 MiB), or guest RAM above MaxMemory.
	ErrUnsupported = errors.New("linuxboot: unsupported kernel")
	// ErrTooSmall: guest RAM cannot hold the kernel, its decompression
	// area and the initrd. The message gives the sizes in MiB.
	ErrTooSmall = errors.New("linuxboot: guest RAM too small")
	// ErrInvalidCmdline: the command line is longer than the kernel's
	// cmdline_size or MaxCmdline, or contains a NUL byte.
	ErrInvalidCmdline = errors.New("linuxboot: invalid kernel command line")
)

// Boot protocol constants (boot.rst, bootparam.h).
const (
	// MinVersion is the oldest boot protocol Load accepts: 2.12, the first
	// with xloadflags and so XLF_KERNEL_64 (the 64-bit entry point).
	MinVersion = 0x20c
	// LoadedHigh is loadflags bit 0: the protected-mode kernel loads at
	// 0x100000 (a bzImage, not a zImage).
	LoadedHigh = 1 << 0
	// CanUseHeap is loadflags bit 7: heap_end_ptr is valid.
	CanUseHeap = 1 << 7
	// XLFKernel64 is xloadflags bit 0: the kernel has the 64-bit entry point
	// at its load address + 0x200.
	XLFKernel64 = 1 << 0
	// HeaderMagic is the setup header signature at 0x202, "HdrS".
	HeaderMagic = "HdrS"
)

// Offsets of setup-header fields. The setup header sits at the same offsets
// in the bzImage file and in struct boot_params.
const (
	offSetupSects      = 0x1f1
	offVidMode         = 0x1fa
	offJump            = 0x200 // 2-byte short jump; the byte at 0x201 is its displacement
	offHeader          = 0x202
	offVersion         = 0x206
	offKernelVersion   = 0x20e
	offTypeOfLoader    = 0x210
	offLoadFlags       = 0x211
	offCode32Start     = 0x214
	offRamdiskImage    = 0x218
	offRamdiskSize     = 0x21c
	offHeapEndPtr      = 0x224
	offCmdLinePtr      = 0x228
	offInitrdAddrMax   = 0x22c
	offKernelAlignment = 0x230
	offRelocatable     = 0x234
	offXLoadFlags      = 0x236
	offCmdlineSize     = 0x238
	offSetupData       = 0x250
	offPrefAddress     = 0x258
	offInitSize        = 0x260
)

const (
	sectorSize = 512
	// maxKernelVersion bounds the kernel_version string, NUL included.
	maxKernelVersion = 256
)

// Header is the parsed real-mode setup header of a bzImage. Fields a boot
// protocol older than the one that introduced them hold boot.rst's
// defaults.
type Header struct {
	// SetupSects is the raw setup_sects byte at 0x1f1: the size of the
	// real-mode setup in 512-byte sectors, not counting the boot sector
	// (0 means 4).
	SetupSects uint8
	// Version is the boot protocol version at 0x206, e.g. 0x20f for 2.15.
	Version uint16
	// LoadFlags is loadflags at 0x211 (LoadedHigh, CanUseHeap, ...).
	LoadFlags uint8
	// Code32Start is the 32-bit entry address at 0x214 (unused by Load).
	Code32Start uint32
	// InitrdAddrMax is the highest address the initrd may occupy (its last
	// byte), at 0x22c; 0x37ffffff before protocol 2.03.
	InitrdAddrMax uint32
	// KernelAlignment is the alignment, in bytes, a relocatable kernel needs
	// at run time (0x230; protocol >= 2.05).
	KernelAlignment uint32
	// RelocatableKernel is relocatable_kernel at 0x234 (protocol >= 2.05).
	RelocatableKernel bool
	// CmdlineSize is the longest command line the kernel accepts, in bytes
	// without the terminating NUL (0x238; 255 before protocol 2.06).
	CmdlineSize uint32
	// XLoadFlags is xloadflags at 0x236 (XLFKernel64, ...; protocol >= 2.12).
	XLoadFlags uint16
	// PrefAddress is the preferred load address at 0x258 (protocol >= 2.10):
	// the kernel's LOAD_PHYSICAL_ADDR, where it decompresses itself unless it
	// is relocatable and loaded higher.
	PrefAddress uint64
	// InitSize is the memory, in bytes, the kernel needs from its run-time
	// start address before it reads the memory map (0x260; protocol >= 2.10).
	InitSize uint32
	// KernelVersion is the NUL-terminated string at kernel_version (0x20e)
	// + 0x200, e.g. "6.1.0-57-cloud-amd64 (debian-kernel@...) #1 SMP ...";
	// "" if absent, outside the setup code, unterminated within 256 bytes or
	// not printable ASCII.
	KernelVersion string
	// SetupBytes is the size of the real-mode part of the file, boot sector
	// included: (SetupSects+1)*512 with 0 sectors read as 4. The
	// protected-mode kernel starts at this file offset.
	SetupBytes int
}

// ParseHeader parses and validates the setup header of a bzImage. It
// returns an error wrapping ErrNotBzImage if kernel is not a bzImage, and
// one wrapping ErrUnsupported if it is one Load cannot boot (see
// MinVersion, LoadedHigh, XLFKernel64). kernel is not retained.
func ParseHeader(kernel []byte) (*Header, error) {
	if len(kernel) < offHeader+len(HeaderMagic) || string(kernel[offHeader:offHeader+len(HeaderMagic)]) != HeaderMagic {
		return nil, notBzImage(kernel)
	}
	h := &Header{SetupSects: kernel[offSetupSects]}
	sects := int(h.SetupSects)
	if sects == 0 {
		sects = 4
	}
	h.SetupBytes = (sects + 1) * sectorSize
	if h.SetupBytes >= len(kernel) {
		return nil, fmt.Errorf("%w: setup_sects %d makes the real-mode setup %d bytes, which leaves no protected-mode kernel in a %d-byte file",
			ErrNotBzImage, h.SetupSects, h.SetupBytes, len(kernel))
	}
	// Every offset below is under 0x302 < 1024 <= SetupBytes < len(kernel).
	le := binary.LittleEndian
	h.Version = le.Uint16(kernel[offVersion:])
	h.LoadFlags = kernel[offLoadFlags]
	h.Code32Start = le.Uint32(kernel[offCode32Start:])
	h.InitrdAddrMax = 0x37ffffff
	if h.Version >= 0x203 {
		h.InitrdAddrMax = le.Uint32(kernel[offInitrdAddrMax:])
	}
	if h.Version >= 0x205 {
		h.KernelAlignment = le.Uint32(kernel[offKernelAlignment:])
		h.RelocatableKernel = kernel[offRelocatable] != 0
	}
	h.CmdlineSize = 255
	if h.Version >= 0x206 {
		h.CmdlineSize = le.Uint32(kernel[offCmdlineSize:])
	}
	if h.Version >= 0x20a {
		h.PrefAddress = le.Uint64(kernel[offPrefAddress:])
		h.InitSize = le.Uint32(kernel[offInitSize:])
	}
	if h.Version >= 0x20c {
		h.XLoadFlags = le.Uint16(kernel[offXLoadFlags:])
	}
	h.KernelVersion = kernelVersion(kernel[:h.SetupBytes], le.Uint16(kernel[offKernelVersion:]))

	switch {
	case h.Version < MinVersion:
		return nil, fmt.Errorf("%w: boot protocol %s is older than %s, the first with a 64-bit entry point (XLF_KERNEL_64)",
			ErrUnsupported, versionString(h.Version), versionString(MinVersion))
	case headerEnd(kernel) < offInitSize+4:
		return nil, fmt.Errorf("%w: malformed setup header: it ends at %#x (0x202 + the byte at 0x201), before the end of init_size at %#x",
			ErrNotBzImage, headerEnd(kernel), offInitSize+4)
	case h.LoadFlags&LoadedHigh == 0:
		return nil, fmt.Errorf("%w: loadflags %#x lacks LOADED_HIGH: a zImage, which loads at 0x10000 and has no 64-bit entry",
			ErrUnsupported, h.LoadFlags)
	case h.XLoadFlags&XLFKernel64 == 0:
		return nil, fmt.Errorf("%w: xloadflags %#x lacks XLF_KERNEL_64: the kernel has no 64-bit entry point",
			ErrUnsupported, h.XLoadFlags)
	case h.RelocatableKernel && (h.KernelAlignment == 0 || h.KernelAlignment&(h.KernelAlignment-1) != 0):
		return nil, fmt.Errorf("%w: relocatable kernel with kernel_alignment %#x, which is not a power of two",
			ErrUnsupported, h.KernelAlignment)
	}
	return h, nil
}

// headerEnd is the end of the setup header in kernel, which must be at
// least 0x202 bytes long: 0x202 plus the displacement of the short jump at
// 0x200 (boot.rst, "64-bit Boot Protocol").
func headerEnd(kernel []byte) int {
	return offHeader + int(kernel[offJump+1])
}

// notBzImage explains why a file without the "HdrS" magic is not a bzImage.
func notBzImage(kernel []byte) error {
	switch {
	case bytes.HasPrefix(kernel, []byte("\x7fELF")):
		return fmt.Errorf("%w: the file is an ELF image (vmlinux), and only bzImage is supported: pass the vmlinuz/bzImage file instead",
			ErrNotBzImage)
	case bytes.HasPrefix(kernel, []byte("MZ")):
		return fmt.Errorf("%w: the file is a PE/EFI image without a Linux boot header (no %q magic at %#x)",
			ErrNotBzImage, HeaderMagic, offHeader)
	case len(kernel) < offHeader+len(HeaderMagic):
		return fmt.Errorf("%w: file of %d bytes is too short for a setup header (%d bytes at least)",
			ErrNotBzImage, len(kernel), offHeader+len(HeaderMagic))
	default:
		return fmt.Errorf("%w: no %q magic at %#x", ErrNotBzImage, HeaderMagic, offHeader)
	}
}

// kernelVersion returns the NUL-terminated printable string at ptr+0x200 in
// setup, or "" if ptr is 0 or the string is out of bounds, unterminated or
// not printable ASCII.
func kernelVersion(setup []byte, ptr uint16) string {
	if ptr == 0 {
		return ""
	}
	start := int(ptr) + 0x200
	if start >= len(setup) {
		return ""
	}
	s := setup[start:min(len(setup), start+maxKernelVersion)]
	n := bytes.IndexByte(s, 0)
	if n <= 0 {
		return ""
	}
	for _, c := range s[:n] {
		if c < 0x20 || c > 0x7e {
			return ""
		}
	}
	return string(s[:n])
}

// versionString formats a boot protocol version: 0x20f is "2.15".
func versionString(v uint16) string {
	return fmt.Sprintf("%d.%02d", v>>8, v&0xff)
}
