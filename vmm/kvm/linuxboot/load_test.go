package linuxboot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// memPattern is what tests fill guest RAM with before Load, so that a
// stray write, or a zero page that was not cleared, shows.
const memPattern = 0xa5

// wantE820 is the memory map for memSize bytes of RAM, written out by hand.
func wantE820(memSize uint64) []E820Entry {
	return []E820Entry{
		{Addr: 0, Size: 0x9fc00, Type: 1},
		{Addr: 0x9fc00, Size: 0x400, Type: 2},
		{Addr: 0xf0000, Size: 0x10000, Type: 2},
		{Addr: 0x100000, Size: memSize - 0x100000, Type: 1},
	}
}

// wantZeroPage is the zero page Load should write for kernel, built
// independently of Load: a zeroed page, the setup header copied from
// 0x1f1 to 0x202 + kernel[0x201], then the fields the boot loader sets, at
// the offsets bootparam.h gives.
func wantZeroPage(kernel []byte, l *Layout, cmdlineAddr, memSize uint64) []byte {
	zp := make([]byte, 4096)
	end := 0x202 + int(kernel[0x201])
	copy(zp[0x1f1:end], kernel[0x1f1:end])
	le := binary.LittleEndian
	le.PutUint16(zp[0x1fa:], 0xffff) // vid_mode: normal
	zp[0x210] = 0xff                 // type_of_loader
	zp[0x211] |= 0x80                // loadflags: CAN_USE_HEAP
	le.PutUint16(zp[0x224:], 0xfe00) // heap_end_ptr
	le.PutUint32(zp[0x228:], uint32(cmdlineAddr))
	le.PutUint32(zp[0x0c8:], uint32(cmdlineAddr>>32))
	le.PutUint32(zp[0x218:], uint32(l.InitrdAddr))
	le.PutUint32(zp[0x0c0:], uint32(l.InitrdAddr>>32))
	le.PutUint32(zp[0x21c:], uint32(l.InitrdSize))
	le.PutUint32(zp[0x0c4:], uint32(l.InitrdSize>>32))
	le.PutUint64(zp[0x250:], 0) // setup_data
	e820 := wantE820(memSize)
	zp[0x1e8] = byte(len(e820))
	for i, e := range e820 {
		b := zp[0x2d0+20*i:]
		le.PutUint64(b, e.Addr)
		le.PutUint64(b[8:], e.Size)
		le.PutUint32(b[16:], e.Type)
	}
	return zp
}

// checkLoaded checks everything Load put in mem (filled with memPattern
// before) against kernel, initrd and cmdline.
func checkLoaded(t *testing.T, mem []byte, l *Layout, kernel, initrd []byte, cmdline string) {
	t.Helper()
	memSize := uint64(len(mem))
	h := l.Header
	pm := kernel[h.SetupBytes:]
	if l.KernelAddr != 0x100000 || l.Entry != 0x100200 || l.BootParams != 0x7000 || l.CmdlineAddr != 0x30000 {
		t.Errorf("Layout KernelAddr %#x Entry %#x BootParams %#x CmdlineAddr %#x; want 0x100000 0x100200 0x7000 0x30000",
			l.KernelAddr, l.Entry, l.BootParams, l.CmdlineAddr)
	}
	if want := 0x100000 + max(uint64(len(pm)), uint64(h.InitSize)); l.KernelEnd != want {
		t.Errorf("KernelEnd = %#x, want %#x", l.KernelEnd, want)
	}
	if diff := cmp.Diff(wantE820(memSize), l.E820); diff != "" {
		t.Errorf("Layout.E820 (-want +got):\n%s", diff)
	}
	if !bytes.Equal(mem[0x100000:0x100000+len(pm)], pm) {
		t.Error("protected-mode kernel not at 0x100000")
	}
	if got := string(mem[0x30000 : 0x30000+len(cmdline)+1]); got != cmdline+"\x00" {
		t.Errorf("cmdline at 0x30000 = %q, want %q", got, cmdline+"\x00")
	}
	zp := mem[0x7000:0x8000]
	if got := string(zp[0x202:0x206]); got != "HdrS" {
		t.Errorf("zero page magic at 0x202 = %q, want HdrS", got)
	}
	if got := zp[0x1e8]; got != 4 {
		t.Errorf("e820_entries = %d, want 4", got)
	}
	if diff := cmp.Diff(wantZeroPage(kernel, l, 0x30000, memSize), zp); diff != "" {
		t.Errorf("zero page (-want +got):\n%s", diff)
	}
	if l.InitrdSize != uint64(len(initrd)) {
		t.Errorf("InitrdSize = %d, want %d", l.InitrdSize, len(initrd))
	}
	written := []span{
		{0x7000, 0x8000},
		{0x30000, 0x30000 + uint64(len(cmdline)) + 1},
		{0x100000, 0x100000 + uint64(len(pm))},
	}
	if len(initrd) > 0 {
		end := l.InitrdAddr + l.InitrdSize
		switch {
		case l.InitrdAddr%4096 != 0:
			t.Errorf("InitrdAddr %#x not page-aligned", l.InitrdAddr)
		case end > uint64(h.InitrdAddrMax)+1 || end > memSize:
			t.Errorf("initrd [%#x, %#x) ends above initrd_addr_max+1 %#x or RAM %#x", l.InitrdAddr, end, uint64(h.InitrdAddrMax)+1, memSize)
		case l.InitrdAddr < l.KernelEnd || l.InitrdAddr < l.DecompressEnd:
			t.Errorf("initrd at %#x below KernelEnd %#x or DecompressEnd %#x", l.InitrdAddr, l.KernelEnd, l.DecompressEnd)
		case min(uint64(h.InitrdAddrMax)+1, memSize)-end >= 4096:
			t.Errorf("initrd [%#x, %#x) not as high as possible", l.InitrdAddr, end)
		case !bytes.Equal(mem[l.InitrdAddr:end], initrd):
			t.Errorf("initrd bytes not at %#x", l.InitrdAddr)
		}
		written = append(written, span{l.InitrdAddr, end})
	} else if l.InitrdAddr != 0 {
		t.Errorf("InitrdAddr = %#x without an initrd", l.InitrdAddr)
	}
	// Everything else, GDT and page tables included, is as it was.
	checkUntouched(t, mem, memPattern, written)
}

// loadCase is one TestLoadSynthetic case.
type loadCase struct {
	name    string
	kernel  []byte
	memSize int
	initrd  []byte
	cmdline string
	want    Layout // compared in its address fields
}

// loadCases are TestLoadSynthetic's cases: synthetic kernels, RAM sizes,
// initramfs and command lines, with the layout Load must choose.
func loadCases() []loadCase { return append(basicLoadCases(), headerLoadCases()...) }

// basicLoadCases vary the initramfs, the command line and the RAM size.
func basicLoadCases() []loadCase {
	return []loadCase{
		{
			name: "initrd and cmdline", kernel: syntheticKernel(), memSize: synthMem,
			initrd: pattern(100000, 1), cmdline: "console=ttyS0 panic=-1",
			want: Layout{
				KernelEnd:      0x100000 + synthInitSize,
				InitrdAddr:     (synthMem - 100000) &^ 4095,
				InitrdSize:     100000,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
		{
			name: "no initrd, empty cmdline", kernel: syntheticKernel(), memSize: synthMem,
			want: Layout{
				KernelEnd:      0x100000 + synthInitSize,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
		{
			name: "cmdline of cmdline_size bytes", kernel: syntheticKernel(), memSize: synthMem,
			initrd: []byte{7}, cmdline: strings.Repeat("x", synthCmdlineMax),
			want: Layout{
				KernelEnd:  0x100000 + synthInitSize,
				InitrdAddr: synthMem - 4096, InitrdSize: 1,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
		{
			name: "cmdline of MaxCmdline-1 bytes", kernel: withKernel(put32(offCmdlineSize, 0xffffffff)), memSize: synthMem,
			cmdline: strings.Repeat("y", MaxCmdline-1),
			want: Layout{
				KernelEnd:      0x100000 + synthInitSize,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
		{
			// The initrd fills RAM exactly from the decompression area's end.
			name: "smallest RAM for the initrd", kernel: syntheticKernel(), memSize: synthPref + synthInitSize + 8192,
			initrd: pattern(8192, 2),
			want: Layout{
				KernelEnd:  0x100000 + synthInitSize,
				InitrdAddr: synthPref + synthInitSize, InitrdSize: 8192,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
	}
}

// headerLoadCases are the cases whose kernel header differs from the
// synthetic kernel's.
func headerLoadCases() []loadCase {
	return []loadCase{
		{
			name: "initrd below initrd_addr_max", kernel: withKernel(put32(offInitrdAddrMax, 0x37ffff)), memSize: synthMem,
			initrd: pattern(5000, 3),
			want: Layout{
				KernelEnd:  0x100000 + synthInitSize,
				InitrdAddr: (0x380000 - 5000) &^ 4095, InitrdSize: 5000,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
		{
			// The image is larger than init_size: KernelEnd follows the image.
			name: "init_size below the image", kernel: withKernel(put32(offInitSize, 0x1000)), memSize: synthMem,
			initrd: pattern(4096, 4),
			want: Layout{
				KernelEnd:  0x100000 + synthPMSize,
				InitrdAddr: synthMem - 4096, InitrdSize: 4096,
				DecompressAddr: synthPref, DecompressEnd: synthPref + 0x1000,
			},
		},
		{
			// Relocatable, loaded above pref_address: it runs where loaded,
			// rounded up to kernel_alignment.
			name: "pref_address below the load address", kernel: withKernel(func(k []byte) {
				put64(offPrefAddress, 0x80000)(k)
				put32(offKernelAlignment, 0x100000)(k)
			}), memSize: synthMem,
			want: Layout{
				KernelEnd:      0x100000 + synthInitSize,
				DecompressAddr: 0x100000, DecompressEnd: 0x100000 + synthInitSize,
			},
		},
		{
			name: "not relocatable", kernel: withKernel(func(k []byte) { k[offRelocatable] = 0 }), memSize: synthMem,
			initrd: pattern(4096, 5),
			want: Layout{
				KernelEnd:  0x100000 + synthInitSize,
				InitrdAddr: synthMem - 4096, InitrdSize: 4096,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
		{
			// The fuzz seed: it decompresses over its own image at 1 MiB.
			name: "fuzz seed kernel", kernel: fuzzKernel(), memSize: fuzzMemSize,
			initrd: pattern(4097, 6), cmdline: "quiet",
			want: Layout{
				KernelEnd:  0x110000,
				InitrdAddr: fuzzMemSize - 8192, InitrdSize: 4097,
				DecompressAddr: 0x100000, DecompressEnd: 0x110000,
			},
		},
		{
			// A header longer than boot_params has room for is cut at 0x290.
			name: "setup header jump past 0x290", kernel: withKernel(func(k []byte) { k[offJump+1] = 0xff }), memSize: synthMem,
			want: Layout{
				KernelEnd:      0x100000 + synthInitSize,
				DecompressAddr: synthPref, DecompressEnd: synthPref + synthInitSize,
			},
		},
	}
}

func TestLoadSynthetic(t *testing.T) {
	t.Parallel()
	tests := loadCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mem := make([]byte, tt.memSize)
			fill(mem, memPattern)
			l, err := Load(mem, Params{Kernel: tt.kernel, Initrd: tt.initrd, Cmdline: tt.cmdline})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := Layout{
				KernelEnd: l.KernelEnd, InitrdAddr: l.InitrdAddr, InitrdSize: l.InitrdSize,
				DecompressAddr: l.DecompressAddr, DecompressEnd: l.DecompressEnd,
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Layout (-want +got):\n%s", diff)
			}
			if tt.kernel[offJump+1] == 0xff {
				// The model copies up to 0x301; Load stops at 0x290.
				if got := mem[0x7000+0x290 : 0x7000+0x2d0]; !bytes.Equal(got, make([]byte, 0x40)) {
					t.Errorf("zero page [0x290, 0x2d0) = %x, want zeros", got)
				}
				return
			}
			checkLoaded(t, mem, l, tt.kernel, tt.initrd, tt.cmdline)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		kernel  []byte
		memSize int
		initrd  int
		cmdline string
		wantErr error
		wantMsg []string
	}{
		{name: "empty kernel", kernel: nil, memSize: synthMem, wantErr: ErrNotBzImage},
		{name: "ELF kernel", kernel: []byte("\x7fELF\x02\x01\x01\x00"), memSize: synthMem, wantErr: ErrNotBzImage, wantMsg: []string{"ELF"}},
		{name: "old protocol", kernel: withKernel(put16(offVersion, 0x20b)), memSize: synthMem, wantErr: ErrUnsupported},
		{
			name: "cmdline too long", kernel: syntheticKernel(), memSize: synthMem,
			cmdline: strings.Repeat("x", synthCmdlineMax+1),
			wantErr: ErrInvalidCmdline, wantMsg: []string{"2048 bytes", "cmdline_size of 2047"},
		},
		{
			name: "cmdline beyond MaxCmdline", kernel: withKernel(put32(offCmdlineSize, 0xffffffff)), memSize: synthMem,
			cmdline: strings.Repeat("x", MaxCmdline),
			wantErr: ErrInvalidCmdline, wantMsg: []string{"65536 bytes and a NUL"},
		},
		{
			name: "cmdline with NUL", kernel: syntheticKernel(), memSize: synthMem,
			cmdline: "console=ttyS0\x00init=/bin/sh", wantErr: ErrInvalidCmdline, wantMsg: []string{"NUL byte at offset 13"},
		},
		{
			name: "initrd too big for RAM", kernel: syntheticKernel(), memSize: synthMem, initrd: 2 << 20,
			wantErr: ErrTooSmall, wantMsg: []string{"initrd of 2.0 MiB", "2.5 MiB", "4.0 MiB"},
		},
		{
			name: "initrd larger than RAM", kernel: syntheticKernel(), memSize: synthMem, initrd: synthMem + 1,
			wantErr: ErrTooSmall, wantMsg: []string{"initrd of 4.0 MiB"},
		},
		{
			name: "initrd_addr_max below the kernel", kernel: withKernel(put32(offInitrdAddrMax, 0x1fffff)), memSize: synthMem, initrd: 1,
			wantErr: ErrTooSmall, wantMsg: []string{"2.0 MiB (the lower of initrd_addr_max+1"},
		},
		{
			name: "RAM smaller than the kernel", kernel: syntheticKernel(), memSize: 1 << 20,
			wantErr: ErrTooSmall, wantMsg: []string{"1.0 MiB of RAM", "1.5 MiB"},
		},
		{
			name: "RAM smaller than the decompression area", kernel: syntheticKernel(), memSize: synthPref + synthInitSize - 1,
			wantErr: ErrTooSmall, wantMsg: []string{"decompresses itself", "2.5 MiB"},
		},
		{name: "no RAM", kernel: syntheticKernel(), memSize: 0, wantErr: ErrTooSmall, wantMsg: []string{"0.0 MiB of RAM"}},
		{
			name: "pref_address far above RAM", kernel: withKernel(put64(offPrefAddress, 1<<63)), memSize: synthMem,
			wantErr: ErrTooSmall,
		},
		{
			name: "pref_address at the top of the address space", kernel: withKernel(func(k []byte) {
				k[offRelocatable] = 0
				put64(offPrefAddress, ^uint64(0))(k)
			}), memSize: synthMem,
			wantErr: ErrTooSmall,
		},
		{
			name: "decompressing below 1 MiB", kernel: withKernel(func(k []byte) {
				k[offRelocatable] = 0
				put64(offPrefAddress, 0x10000)(k)
			}), memSize: synthMem,
			wantErr: ErrUnsupported, wantMsg: []string{"0x10000 (pref_address)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mem := make([]byte, tt.memSize)
			fill(mem, memPattern)
			l, err := Load(mem, Params{Kernel: tt.kernel, Initrd: pattern(tt.initrd, 9), Cmdline: tt.cmdline})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Load = %+v, %v; want an error wrapping %v", l, err, tt.wantErr)
			}
			if l != nil {
				t.Errorf("Load returned a layout with its error: %+v", l)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
			checkUntouched(t, mem, memPattern, nil)
		})
	}
}

// TestPlanMemorySizes covers guest RAM sizes too large to allocate in a
// test: plan computes the layout without touching memory.
func TestPlanMemorySizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		memSize       uint64
		initrdAddrMax uint32
		initrdSize    uint64
		wantErr       error
		wantInitrd    uint64
	}{
		{"3 GiB, initrd below 2 GiB", MaxMemory, 0x7fffffff, 10 << 20, nil, 2<<30 - 10<<20},
		{"3 GiB, odd initrd size", MaxMemory, 0x7fffffff, 10<<20 + 1, nil, 2<<30 - 10<<20 - 4096},
		{"3 GiB, initrd_addr_max 4 GiB", MaxMemory, 0xffffffff, 4096, nil, MaxMemory - 4096},
		{"1 GiB, initrd_addr_max unaligned", 1 << 30, 0x37ffffff - 100, 4096, nil, 0x37ffe000},
		{"above MaxMemory", MaxMemory + 1, 0x7fffffff, 0, ErrUnsupported, 0},
		{"4 GiB", 4 << 30, 0xffffffff, 0, ErrUnsupported, 0},
		{"initrd of 4 GiB", MaxMemory, 0xffffffff, 4 << 30, ErrTooSmall, 0},
		{"initrd of 2^64-1 bytes", MaxMemory, 0xffffffff, ^uint64(0), ErrTooSmall, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := ParseHeader(withKernel(put32(offInitrdAddrMax, tt.initrdAddrMax)))
			if err != nil {
				t.Fatal(err)
			}
			l, err := plan(h, synthPMSize, tt.memSize, tt.initrdSize, "")
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("plan = %+v, %v; want error %v", l, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if l.InitrdAddr != tt.wantInitrd {
				t.Errorf("InitrdAddr = %#x, want %#x", l.InitrdAddr, tt.wantInitrd)
			}
			if got, want := l.E820[3].Size, tt.memSize-0x100000; got != want {
				t.Errorf("E820 RAM above 1 MiB = %#x bytes, want %#x", got, want)
			}
		})
	}
}

// TestLayoutCheck makes sure the final check catches layouts plan must
// never produce.
func TestLayoutCheck(t *testing.T) {
	t.Parallel()
	const memSize = synthMem
	good := func() *Layout {
		return &Layout{
			KernelAddr: KernelAddr, KernelEnd: 0x180000, BootParams: ZeroPageAddr, CmdlineAddr: CmdlineAddr,
			InitrdAddr: 0x300000, InitrdSize: 0x1000, DecompressAddr: 0x200000, DecompressEnd: 0x280000,
			E820: e820Map(memSize),
		}
	}
	tests := []struct {
		name   string
		mutate func(*Layout)
		want   string
	}{
		{"good", func(*Layout) {}, ""},
		{"decompression over the kernel image", func(l *Layout) { l.DecompressAddr = KernelAddr }, ""},
		{"zero page on the GDT", func(l *Layout) { l.BootParams = 0x0 }, "zero page [0x0, 0x1000) overlaps GDT"},
		{"cmdline on the page tables", func(l *Layout) { l.CmdlineAddr = 0x25fff }, "overlaps page tables"},
		{"zero page in the EBDA", func(l *Layout) { l.BootParams = 0x9f000 }, "not inside one E820 RAM range"},
		{"initrd past RAM", func(l *Layout) { l.InitrdAddr = memSize - 1 }, "not inside one E820 RAM range"},
		{"initrd on the kernel", func(l *Layout) { l.InitrdAddr = 0x17f000 }, "kernel [0x100000, 0x180000) overlaps initrd [0x17f000, 0x180000)"},
		{"initrd in the decompression area", func(l *Layout) { l.InitrdAddr = 0x27f000 }, "overlaps kernel decompression area"},
		{"decompression over the zero page", func(l *Layout) { l.DecompressAddr = 0x7000 }, "not inside one E820 RAM range"},
		{"too many E820 entries", func(l *Layout) { l.E820 = make([]E820Entry, 129) }, "129 E820 entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := good()
			tt.mutate(l)
			err := l.check(memSize, 10)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("check: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("check = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestLoadRealKernel loads the Debian kernel the guest image boots.
func TestLoadRealKernel(t *testing.T) {
	path, kernel := realKernel(t)
	h, err := ParseHeader(kernel)
	if err != nil {
		t.Fatalf("ParseHeader(%s): %v", path, err)
	}
	const mib = 1 << 20
	tests := []struct {
		name    string
		memSize int
		initrd  int
		cmdline string
		wantErr error
	}{
		{name: "initrd and cmdline", memSize: 256 * mib, initrd: 3*mib + 123, cmdline: "console=ttyS0 reboot=t panic=-1 nokaslr"},
		{name: "no initrd", memSize: 256 * mib},
		{name: "cmdline of cmdline_size", memSize: 128 * mib, initrd: mib, cmdline: strings.Repeat("c", int(h.CmdlineSize))},
		{name: "cmdline too long", memSize: 96 * mib, cmdline: strings.Repeat("c", int(h.CmdlineSize)+1), wantErr: ErrInvalidCmdline},
		{name: "RAM smaller than the kernel", memSize: 32 * mib, wantErr: ErrTooSmall},
		{name: "RAM without room to decompress", memSize: 64 * mib, wantErr: ErrTooSmall},
		{name: "initrd too big for RAM", memSize: 96 * mib, initrd: 32 * mib, wantErr: ErrTooSmall},
	}
	// Sequential: each case holds up to 256 MiB of guest RAM.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := make([]byte, tt.memSize)
			fill(mem, memPattern)
			initrd := pattern(tt.initrd, 0x5a)
			l, err := Load(mem, Params{Kernel: kernel, Initrd: initrd, Cmdline: tt.cmdline})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Load = %v; want %v", err, tt.wantErr)
			}
			if err != nil {
				t.Logf("Load: %v", err)
				checkUntouched(t, mem, memPattern, nil)
				return
			}
			t.Logf("kernel [%#x, %#x) decompresses in [%#x, %#x), initrd [%#x, %#x)",
				l.KernelAddr, l.KernelEnd, l.DecompressAddr, l.DecompressEnd, l.InitrdAddr, l.InitrdAddr+l.InitrdSize)
			if l.DecompressAddr != h.PrefAddress {
				t.Errorf("DecompressAddr = %#x, want pref_address %#x", l.DecompressAddr, h.PrefAddress)
			}
			checkLoaded(t, mem, l, kernel, initrd, tt.cmdline)
		})
	}
}
