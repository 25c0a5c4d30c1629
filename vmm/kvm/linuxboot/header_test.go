package linuxboot

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseHeader(t *testing.T) {
	t.Parallel()
	synth := Header{
		SetupSects:        synthSetupSects,
		Version:           0x20f,
		LoadFlags:         LoadedHigh,
		Code32Start:       KernelAddr,
		InitrdAddrMax:     0x7fffffff,
		KernelAlignment:   synthAlign,
		RelocatableKernel: true,
		CmdlineSize:       synthCmdlineMax,
		XLoadFlags:        XLFKernel64 | 1<<1,
		PrefAddress:       synthPref,
		InitSize:          synthInitSize,
		KernelVersion:     synthVersion,
		SetupBytes:        synthSetupBytes,
	}
	with := func(f func(*Header)) Header {
		h := synth
		f(&h)
		return h
	}
	tests := []struct {
		name   string
		kernel []byte
		want   Header
	}{
		{"synthetic", syntheticKernel(), synth},
		{
			// setup_sects 0 means 4: the same layout as 4.
			"setup_sects 0", withKernel(func(k []byte) { k[offSetupSects] = 0 }),
			with(func(h *Header) { h.SetupSects = 0 }),
		},
		{
			"setup_sects 1", withKernel(func(k []byte) { k[offSetupSects] = 1 }),
			// The version string at 0x400 now lies past the setup code.
			with(func(h *Header) { h.SetupSects, h.SetupBytes, h.KernelVersion = 1, 1024, "" }),
		},
		{
			"no kernel_version", withKernel(put16(offKernelVersion, 0)),
			with(func(h *Header) { h.KernelVersion = "" }),
		},
		{
			"kernel_version past the setup", withKernel(put16(offKernelVersion, synthSetupBytes-0x200)),
			with(func(h *Header) { h.KernelVersion = "" }),
		},
		{
			"kernel_version at the last setup byte", withKernel(func(k []byte) {
				put16(offKernelVersion, synthSetupBytes-1-0x200)(k)
				k[synthSetupBytes-1] = 'x' // runs into the protected-mode part: unterminated
			}),
			with(func(h *Header) { h.KernelVersion = "" }),
		},
		{
			"kernel_version unterminated within 256 bytes", withKernel(func(k []byte) {
				copy(k[synthVersionOff:], strings.Repeat("v", 300))
			}),
			with(func(h *Header) { h.KernelVersion = "" }),
		},
		{
			"kernel_version of 255 characters", withKernel(func(k []byte) {
				copy(k[synthVersionOff:], strings.Repeat("v", 255)+"\x00")
			}),
			with(func(h *Header) { h.KernelVersion = strings.Repeat("v", 255) }),
		},
		{
			"kernel_version not printable", withKernel(func(k []byte) { k[synthVersionOff+3] = 0x01 }),
			with(func(h *Header) { h.KernelVersion = "" }),
		},
		{
			"kernel_version empty", withKernel(func(k []byte) { k[synthVersionOff] = 0 }),
			with(func(h *Header) { h.KernelVersion = "" }),
		},
		{
			"not relocatable", withKernel(func(k []byte) { k[offRelocatable] = 0; put32(offKernelAlignment, 0)(k) }),
			with(func(h *Header) { h.RelocatableKernel, h.KernelAlignment = false, 0 }),
		},
		{
			// An EFI-stub bzImage starts with "MZ" and has the setup header too.
			"EFI stub bzImage", withKernel(func(k []byte) { copy(k, "MZ") }),
			synth,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseHeader(tt.kernel)
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("ParseHeader mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	t.Parallel()
	elf := append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 4096)...)
	mz := append([]byte("MZ"), make([]byte, 4096)...)
	tests := []struct {
		name    string
		kernel  []byte
		wantErr error
		wantMsg []string
	}{
		{"nil", nil, ErrNotBzImage, []string{"0 bytes", "too short"}},
		{"empty", []byte{}, ErrNotBzImage, []string{"too short"}},
		{"short", make([]byte, 0x205), ErrNotBzImage, []string{"too short"}},
		{"header cut in the magic", syntheticKernel()[:0x204], ErrNotBzImage, []string{"too short"}},
		{"ELF vmlinux", elf, ErrNotBzImage, []string{"ELF image (vmlinux)", "only bzImage is supported", "vmlinuz/bzImage"}},
		{"ELF magic only", []byte("\x7fELF"), ErrNotBzImage, []string{"ELF image"}},
		{"MZ without HdrS", mz, ErrNotBzImage, []string{"PE/EFI image without a Linux boot header"}},
		{"zeros", make([]byte, 8192), ErrNotBzImage, []string{`no "HdrS" magic at 0x202`}},
		{"magic lowercase", withKernel(func(k []byte) { copy(k[offHeader:], "hdrs") }), ErrNotBzImage, []string{"HdrS"}},
		{
			"huge setup_sects", withKernel(func(k []byte) { k[offSetupSects] = 0xff }),
			ErrNotBzImage, []string{"setup_sects 255", "131072 bytes", "no protected-mode kernel"},
		},
		{
			"setup fills the file", syntheticKernel()[:synthSetupBytes],
			ErrNotBzImage, []string{"no protected-mode kernel"},
		},
		{
			"setup header ends before init_size", withKernel(func(k []byte) { k[offJump+1] = 0x10 }),
			ErrNotBzImage, []string{"malformed setup header", "0x212"},
		},
		{"protocol 2.11", withKernel(put16(offVersion, 0x20b)), ErrUnsupported, []string{"boot protocol 2.11", "older than 2.12", "XLF_KERNEL_64"}},
		{"protocol 2.00", withKernel(put16(offVersion, 0x200)), ErrUnsupported, []string{"boot protocol 2.00"}},
		{"protocol 0", withKernel(put16(offVersion, 0)), ErrUnsupported, []string{"boot protocol 0.00"}},
		{"no XLF_KERNEL_64", withKernel(put16(offXLoadFlags, 1<<1)), ErrUnsupported, []string{"XLF_KERNEL_64", "no 64-bit entry"}},
		{"zImage", withKernel(func(k []byte) { k[offLoadFlags] = 0x80 }), ErrUnsupported, []string{"LOADED_HIGH", "zImage"}},
		{"alignment 0", withKernel(put32(offKernelAlignment, 0)), ErrUnsupported, []string{"kernel_alignment 0x0"}},
		{"alignment not a power of two", withKernel(put32(offKernelAlignment, 0x300000)), ErrUnsupported, []string{"kernel_alignment 0x300000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := ParseHeader(tt.kernel)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseHeader = %+v, %v; want an error wrapping %v", h, err, tt.wantErr)
			}
			if h != nil {
				t.Errorf("ParseHeader returned a header with its error: %+v", h)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

// TestParseHeaderRealKernel checks the header of the Debian kernel the
// guest image boots.
func TestParseHeaderRealKernel(t *testing.T) {
	t.Parallel()
	path, kernel := realKernel(t)
	h, err := ParseHeader(kernel)
	if err != nil {
		t.Fatalf("ParseHeader(%s): %v", path, err)
	}
	t.Logf("%s: %+v", path, h)
	checks := []struct {
		name string
		ok   bool
	}{
		{"Version >= 0x20f", h.Version >= 0x20f},
		{`KernelVersion starts with "6.1.0"`, strings.HasPrefix(h.KernelVersion, "6.1.0")},
		{"XLF_KERNEL_64", h.XLoadFlags&XLFKernel64 != 0},
		{"LOADED_HIGH", h.LoadFlags&LoadedHigh != 0},
		{"relocatable", h.RelocatableKernel},
		{"CmdlineSize >= 255", h.CmdlineSize >= 255},
		{"InitSize > protected-mode size", uint64(h.InitSize) > uint64(len(kernel)-h.SetupBytes)},
		{"PrefAddress >= KernelAddr", h.PrefAddress >= KernelAddr},
		{"SetupBytes < len(kernel)", h.SetupBytes < len(kernel)},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: want %s", path, c.name)
		}
	}
}
