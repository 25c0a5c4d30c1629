package linuxboot

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// fuzzMemSize is FuzzLoad's guest RAM in bytes.
const fuzzMemSize = 2 << 20

// fuzzVersionOff is where fuzzKernel's version string sits: right after
// the setup header, so that the fuzzed head of the file holds it.
const fuzzVersionOff = synthHeaderEnd + 4

// fuzzKernel is a small valid bzImage for the fuzz seeds, so that the
// fuzzer's inputs stay small and it boots in fuzzMemSize of RAM: one setup
// sector, 256 bytes of kernel, 64 KiB of init_size at 1 MiB.
func fuzzKernel() []byte {
	k := syntheticKernel()[:2*sectorSize+256]
	k[offSetupSects] = 1
	put16(offKernelVersion, fuzzVersionOff-0x200)(k)
	copy(k[fuzzVersionOff:], "6.1.0-fuzz\x00")
	put64(offPrefAddress, KernelAddr)(k)
	put32(offKernelAlignment, 0x1000)(k)
	put32(offInitSize, 0x10000)(k)
	copy(k[2*sectorSize:], pattern(256, 0x77))
	return k
}

// fuzzSeeds are kernel files for the seed corpora: base and variants of
// it near each validation boundary.
func fuzzSeeds(base []byte) [][]byte {
	with := func(mutate func([]byte)) []byte {
		k := bytes.Clone(base)
		mutate(k)
		return k
	}
	return [][]byte{
		base,
		with(func(k []byte) { k[offSetupSects] = 0 }),
		with(put16(offVersion, 0x20b)),
		with(put16(offXLoadFlags, 0)),
		with(func(k []byte) { k[offRelocatable] = 0 }),
		with(put32(offInitSize, 0)),
		with(put32(offInitrdAddrMax, 0x17ffff)),
		with(put64(offPrefAddress, 0x80000)),
		with(func(k []byte) { k[offJump+1] = 0xff }),
		with(func(k []byte) { copy(k, "MZ") }),
		base[:len(base)-256],
		[]byte("\x7fELF\x02\x01\x01\x00"),
	}
}

// fuzzFile builds FuzzParseHeader's kernel file: head, then fuzzPM's
// bytes up to size bytes in all. Fuzzing the head of the file rather than a
// whole file keeps the inputs small enough for the fuzzer to minimize.
func fuzzFile(head []byte, size uint16) []byte {
	k := make([]byte, max(len(head), int(size)))
	copy(k[copy(k, head):], fuzzPM)
	return k
}

func FuzzParseHeader(f *testing.F) {
	for _, k := range fuzzSeeds(fuzzKernel()) {
		f.Add(k[:min(len(k), fuzzHeaderEnd)], uint16(len(k)))
	}
	// The real kernel's head, if it is unpacked here: its setup header,
	// with setup_sects cut to 1. Optional: without it (or if it cannot be
	// read) the synthetic seeds cover every field.
	if paths, err := filepath.Glob("/var/cache/themis/kernels/*/boot/vmlinuz-*"); err == nil && len(paths) > 0 {
		if k, err := os.ReadFile(paths[0]); err == nil && len(k) > fuzzHeaderEnd {
			head := bytes.Clone(k[:fuzzHeaderEnd])
			head[offSetupSects] = 1
			f.Add(head, uint16(2*sectorSize+16))
		}
	}
	f.Fuzz(func(t *testing.T, head []byte, size uint16) {
		kernel := fuzzFile(head, size)
		h, err := ParseHeader(kernel)
		if err != nil {
			if h != nil {
				t.Fatalf("header %+v with error %v", h, err)
			}
			if !errors.Is(err, ErrNotBzImage) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v wraps neither ErrNotBzImage nor ErrUnsupported", err)
			}
			return
		}
		switch {
		case h.SetupBytes < 1024 || h.SetupBytes >= len(kernel):
			t.Fatalf("SetupBytes %d for a %d-byte file", h.SetupBytes, len(kernel))
		case h.Version < MinVersion || h.XLoadFlags&XLFKernel64 == 0 || h.LoadFlags&LoadedHigh == 0:
			t.Fatalf("accepted unsupported header %+v", h)
		case len(h.KernelVersion) >= maxKernelVersion:
			t.Fatalf("KernelVersion of %d bytes", len(h.KernelVersion))
		}
		for _, c := range []byte(h.KernelVersion) {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("KernelVersion %q not printable", h.KernelVersion)
			}
		}
	})
}

// fuzzGuard is the byte FuzzLoad puts in the VMM's regions.
const fuzzGuard = 0x5c

// fuzzInitrd backs FuzzLoad's initrds, sliced to the size the fuzzer picks;
// Load only reads it.
var fuzzInitrd = pattern(fuzzMemSize+PageSize, 0x33)

// fuzzMem is FuzzLoad's guest RAM, reused and cleared between inputs: a
// fresh allocation per input made the page faults cost more than Load.
var fuzzMem struct {
	sync.Mutex
	b []byte
}

// fuzzHeaderEnd bounds the part of the kernel file FuzzLoad's input
// replaces: the setup header and the rest of boot_params' room for it.
const fuzzHeaderEnd = offHeaderAreaEnd

// fuzzPM backs the protected-mode part of FuzzLoad's kernels.
var fuzzPM = pattern(1<<16, 0x77)

// fuzzImage builds FuzzLoad's kernel file: fuzzKernel's one setup sector
// with hdr written over it from 0x1f1 (a hdr ending before fuzzHeaderEnd
// truncates the file there), then pmSize bytes of protected-mode kernel.
// Fuzzing the header bytes rather than a whole file keeps the inputs small
// enough for the fuzzer to minimize; FuzzParseHeader fuzzes whole files.
func fuzzImage(hdr []byte, pmSize uint16) []byte {
	base := fuzzKernel()
	k := make([]byte, 2*sectorSize+int(pmSize))
	copy(k, base[:2*sectorSize])
	copy(k[2*sectorSize:], fuzzPM)
	hdr = hdr[:min(len(hdr), fuzzHeaderEnd-offSetupSects)]
	copy(k[offSetupSects:], hdr)
	if len(hdr) < fuzzHeaderEnd-offSetupSects {
		k = k[:offSetupSects+len(hdr)]
	}
	return k
}

func FuzzLoad(f *testing.F) {
	for i, k := range fuzzSeeds(fuzzKernel()) {
		if len(k) >= fuzzHeaderEnd {
			f.Add(k[offSetupSects:fuzzHeaderEnd], uint16(len(k)-2*sectorSize), uint32(i*50000), "console=ttyS0")
		}
	}
	hdr := fuzzKernel()[offSetupSects:fuzzHeaderEnd]
	f.Add(hdr, uint16(256), uint32(0), "")
	f.Add(hdr, uint16(0), uint32(0), "")
	f.Add(hdr[:0x202+4-offSetupSects], uint16(256), uint32(0), "")
	f.Add(hdr, uint16(256), uint32(fuzzMemSize), "")
	f.Add(hdr, uint16(256), uint32(1), string(make([]byte, synthCmdlineMax+1)))
	f.Fuzz(func(t *testing.T, hdr []byte, pmSize uint16, initrdSize uint32, cmdline string) {
		kernel := fuzzImage(hdr, pmSize)
		fuzzMem.Lock()
		defer fuzzMem.Unlock()
		if fuzzMem.b == nil {
			fuzzMem.b = make([]byte, fuzzMemSize)
		}
		mem := fuzzMem.b
		clear(mem)
		fill(mem[GDTStart:GDTEnd], fuzzGuard)
		fill(mem[PageTablesStart:PageTablesEnd], fuzzGuard)
		guard := []span{{GDTStart, GDTEnd}, {PageTablesStart, PageTablesEnd}}
		initrd := fuzzInitrd[:initrdSize%uint32(len(fuzzInitrd))]

		l, err := Load(mem, Params{Kernel: kernel, Initrd: initrd, Cmdline: cmdline})
		for _, g := range guard {
			if b := mem[g.start:g.end]; bytes.Count(b, []byte{fuzzGuard}) != len(b) {
				t.Fatalf("Load (err %v) wrote into [%#x, %#x)", err, g.start, g.end)
			}
		}
		if err != nil {
			if l != nil {
				t.Fatalf("layout %+v with error %v", l, err)
			}
			if !errors.Is(err, ErrNotBzImage) && !errors.Is(err, ErrUnsupported) &&
				!errors.Is(err, ErrTooSmall) && !errors.Is(err, ErrInvalidCmdline) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			checkUntouched(t, mem, 0, guard)
			return
		}
		h := l.Header
		pm := kernel[h.SetupBytes:]
		memSize := uint64(len(mem))
		switch {
		case l.Entry != KernelAddr+EntryOffset || l.BootParams != ZeroPageAddr:
			t.Fatalf("Entry %#x BootParams %#x", l.Entry, l.BootParams)
		case l.KernelEnd > memSize || l.DecompressEnd > memSize || l.DecompressAddr < KernelAddr:
			t.Fatalf("kernel [%#x, %#x) or decompression [%#x, %#x) outside RAM above 1 MiB",
				l.KernelAddr, l.KernelEnd, l.DecompressAddr, l.DecompressEnd)
		case !bytes.Equal(mem[KernelAddr:KernelAddr+len(pm)], pm):
			t.Fatal("kernel not at KernelAddr")
		case string(mem[CmdlineAddr:CmdlineAddr+len(cmdline)+1]) != cmdline+"\x00":
			t.Fatal("cmdline not at CmdlineAddr")
		case string(mem[ZeroPageAddr+offHeader:ZeroPageAddr+offHeader+4]) != HeaderMagic:
			t.Fatal("no header copy in the zero page")
		case mem[ZeroPageAddr+offE820Entries] != 4:
			t.Fatalf("e820_entries = %d", mem[ZeroPageAddr+offE820Entries])
		case l.InitrdSize != uint64(len(initrd)):
			t.Fatalf("InitrdSize %d for %d bytes", l.InitrdSize, len(initrd))
		}
		if len(initrd) > 0 {
			end := l.InitrdAddr + l.InitrdSize
			switch {
			case end > min(uint64(h.InitrdAddrMax)+1, memSize):
				t.Fatalf("initrd ends at %#x, above initrd_addr_max %#x or RAM", end, h.InitrdAddrMax)
			case l.InitrdAddr < l.KernelEnd || l.InitrdAddr < l.DecompressEnd || l.InitrdAddr%PageSize != 0:
				t.Fatalf("initrd at %#x: kernel ends at %#x, decompression at %#x", l.InitrdAddr, l.KernelEnd, l.DecompressEnd)
			case !bytes.Equal(mem[l.InitrdAddr:end], initrd):
				t.Fatal("initrd not at InitrdAddr")
			}
		}
	})
}

// TestFuzzImage checks that the fuzz seeds rebuild the fuzz seed kernel,
// which ParseHeader and Load accept, so that the fuzzers start from valid
// input.
func TestFuzzImage(t *testing.T) {
	t.Parallel()
	want := fuzzKernel()
	if got := fuzzImage(want[offSetupSects:fuzzHeaderEnd], 256); !bytes.Equal(got, want) {
		t.Fatalf("fuzzImage(seed header, 256) differs from fuzzKernel()")
	}
	if _, err := Load(make([]byte, fuzzMemSize), Params{Kernel: want, Initrd: fuzzInitrd[:1000], Cmdline: "console=ttyS0"}); err != nil {
		t.Fatalf("Load(fuzzKernel): %v", err)
	}
	h, err := ParseHeader(fuzzFile(want[:fuzzHeaderEnd], uint16(len(want))))
	if err != nil || h.KernelVersion != "6.1.0-fuzz" {
		t.Errorf("ParseHeader(fuzzFile(seed head)) = %+v, %v; want KernelVersion 6.1.0-fuzz", h, err)
	}
	if got := len(fuzzImage(want[offSetupSects:0x202], 256)); got != 0x202 {
		t.Errorf("fuzzImage with a short header: %d bytes, want 0x202", got)
	}
}
