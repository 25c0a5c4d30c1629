package kvm

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/themisfs/themis/vmm/kvm/x86asm"
)

// TestDirtyProgramRuns: the program writes its pages, exits with its code,
// and a restore copies those pages back.
func TestDirtyProgramRuns(t *testing.T) {
	ctx := context.Background()
	const n = 100
	m := newVM(t, VMConfig{MemoryBytes: 64 << 20})
	if err := m.LoadProgram(x86asm.DirtyProgram(DebugExitPort, DataAddr, n, 9)); err != nil {
		t.Fatal(err)
	}
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, m, 9)
	mem := m.RAM()
	for i := range n + 1 {
		got, want := binary.LittleEndian.Uint64(mem[DataAddr+i*PageSize:]), uint64(0x5a5a5a5a)
		if i == n {
			want = 0
		}
		if got != want {
			t.Fatalf("page %d: %#x, want %#x", i, got, want)
		}
	}
	if err := m.Restore(ctx, c0); err != nil {
		t.Fatal(err)
	}
	if got := m.Stats().RestorePages; got < n {
		t.Errorf("restore copied %d pages, want at least %d", got, n)
	}
	if got := binary.LittleEndian.Uint64(mem[DataAddr:]); got != 0 {
		t.Errorf("after restore the first page holds %#x, want 0", got)
	}
}
