package kvm

import (
	"bytes"
	"fmt"
	"testing"
)

// TestDirtyProgramMatchesAsm: DirtyProgram is the test assembler's
// dirtyPages(addr, n).done(code), byte for byte.
func TestDirtyProgramMatchesAsm(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr  uint64
		pages int
		code  uint32
	}{
		{DataAddr, 1, 1},
		{DataAddr, 100, 7},
		{DataAddr, 10000, 0xdeadbeef},
		{0x123456789000, 1 << 40, 0},
	} {
		t.Run(fmt.Sprintf("%#x/%d/%d", tt.addr, tt.pages, tt.code), func(t *testing.T) {
			got := DirtyProgram(tt.addr, tt.pages, tt.code)
			want := new(asm).dirtyPages(tt.addr, tt.pages).done(tt.code).b
			if !bytes.Equal(got, want) {
				t.Errorf("DirtyProgram = % x\nwant           % x", got, want)
			}
		})
	}
	for _, n := range []int{0, -1} {
		if got, want := DirtyProgram(DataAddr, n, 3), new(asm).done(3).b; !bytes.Equal(got, want) {
			t.Errorf("DirtyProgram(pages=%d) = % x, want only the exit % x", n, got, want)
		}
	}
}
