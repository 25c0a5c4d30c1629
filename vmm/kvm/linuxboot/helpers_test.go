package linuxboot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/themisfs/themis/guest"
	"os"
	"path/filepath"
	"testing"
)

// The synthetic bzImage: the smallest kernel file Load accepts, with a
// small init_size and pref_address so that it boots in synthMem of RAM.
const (
	synthSetupSects = 4
	synthSetupBytes = (synthSetupSects + 1) * sectorSize
	synthPMSize     = 3*PageSize + 123
	synthInitSize   = 0x80000
	synthPref       = 0x200000
	synthAlign      = 0x200000
	synthCmdlineMax = 0x7ff
	synthMem        = 4 << 20
	synthVersion    = "6.1.0-synthetic (test@example.org) #1 SMP"
	// synthVersionOff is where the version string sits in the file.
	synthVersionOff = 0x400
	// synthHeaderEnd is 0x202 + the jump displacement, as in 6.1.
	synthHeaderEnd = 0x26c
)

// syntheticKernel returns a valid bzImage for boot protocol 2.15 whose
// protected-mode part is a byte pattern.
func syntheticKernel() []byte {
	k := make([]byte, synthSetupBytes+synthPMSize)
	le := binary.LittleEndian
	k[offSetupSects] = synthSetupSects
	le.PutUint16(k[0x1fe:], 0xaa55) // boot_flag
	k[offJump] = 0xeb               // jmp short
	k[offJump+1] = synthHeaderEnd - offHeader
	copy(k[offHeader:], HeaderMagic)
	le.PutUint16(k[offVersion:], 0x20f)
	le.PutUint16(k[offKernelVersion:], synthVersionOff-0x200)
	copy(k[synthVersionOff:], synthVersion+"\x00")
	k[offLoadFlags] = LoadedHigh
	le.PutUint32(k[offCode32Start:], KernelAddr)
	le.PutUint32(k[offInitrdAddrMax:], 0x7fffffff)
	le.PutUint32(k[offKernelAlignment:], synthAlign)
	k[offRelocatable] = 1
	le.PutUint16(k[offXLoadFlags:], XLFKernel64|1<<1)
	le.PutUint32(k[offCmdlineSize:], synthCmdlineMax)
	le.PutUint64(k[offPrefAddress:], synthPref)
	le.PutUint32(k[offInitSize:], synthInitSize)
	le.PutUint32(k[0x264:], 0x190) // handover_offset, as a nonzero field the copy must carry
	for i := synthSetupBytes; i < len(k); i++ {
		k[i] = byte(i*7 + 3)
	}
	return k
}

// withKernel returns a mutated copy of the synthetic kernel.
func withKernel(mutate func(k []byte)) []byte {
	k := syntheticKernel()
	mutate(k)
	return k
}

func put16(off int, v uint16) func([]byte) {
	return func(k []byte) { binary.LittleEndian.PutUint16(k[off:], v) }
}

func put32(off int, v uint32) func([]byte) {
	return func(k []byte) { binary.LittleEndian.PutUint32(k[off:], v) }
}

func put64(off int, v uint64) func([]byte) {
	return func(k []byte) { binary.LittleEndian.PutUint64(k[off:], v) }
}

// pattern returns n bytes of a recognisable non-zero pattern seeded by seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

// fill sets every byte of b to v.
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// span is a range [start, end) that a test expects Load to have written.
type span struct{ start, end uint64 }

// checkUntouched reports every byte of mem outside the spans that is not
// v, as ranges, so a test sees what Load wrote where it should not.
func checkUntouched(t *testing.T, mem []byte, v byte, written []span) {
	t.Helper()
	ref := make([]byte, 1<<16)
	fill(ref, v)
	inWritten := func(a uint64) (uint64, bool) {
		for _, s := range written {
			if a >= s.start && a < s.end {
				return s.end, true
			}
		}
		return 0, false
	}
	bad := 0
	for a := uint64(0); a < uint64(len(mem)); {
		if end, ok := inWritten(a); ok {
			a = end
			continue
		}
		end := min(a+uint64(len(ref)), uint64(len(mem)))
		for _, s := range written {
			if s.start > a && s.start < end {
				end = s.start
			}
		}
		if !bytes.Equal(mem[a:end], ref[:end-a]) {
			i := uint64(0)
			for mem[a+i] == v {
				i++
			}
			t.Errorf("Load wrote %#x at %#x, outside the regions it owns (%s)", mem[a+i], a+i, regionName(a+i))
			if bad++; bad > 5 {
				t.Fatal("too many stray writes")
			}
		}
		a = end
	}
}

func regionName(a uint64) string {
	switch {
	case a >= GDTStart && a < GDTEnd:
		return "GDT"
	case a >= PageTablesStart && a < PageTablesEnd:
		return "page tables"
	default:
		return fmt.Sprintf("offset %#x", a)
	}
}

// realKernel returns the path and contents of the Debian kernel the guest
// image build unpacks into the guest cache, or skips the test (fails it
// under CI=true, where .ci/run builds the image first, or
// THEMIS_REQUIRE_KERNEL=1).
func realKernel(t *testing.T) (string, []byte) {
	t.Helper()
	cache, err := guest.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	pattern := filepath.Join(cache, "kernels", "*", "boot", "vmlinuz-*")
	paths, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatalf("glob kernels: %v", err)
	}
	if len(paths) == 0 {
		why := "no Debian kernel at " + pattern + " (`themisctl guest build` unpacks it)"
		if os.Getenv("CI") == "true" || os.Getenv("THEMIS_REQUIRE_KERNEL") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	kernel, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatalf("read kernel: %v", err)
	}
	return paths[0], kernel
}
