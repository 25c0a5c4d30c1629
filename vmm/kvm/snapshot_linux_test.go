package kvm

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/vmm/kvm/x86asm"
)

// TestSnapshotFileRoundTrip: a machine saved to a file mid-program and
// loaded into a new VM has the same RAM, registers and device state, and
// the program goes on to the same end in both.
func TestSnapshotFileRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, mode := range dirtyModes {
		t.Run(mode.name, func(t *testing.T) {
			cfg := mode.cfg
			cfg.MemoryBytes = 32 << 20
			m := newVM(t, cfg)
			prog := new(x86asm.Asm).DirtyPages(DataAddr, 64).Out(ScratchPort, 7).Out(DebugExitPort, 1).
				MovImm(x86asm.RBX, 0x1234).DirtyPages(DataAddr+64*PageSize, 16).Out(ScratchPort, 9).Out(DebugExitPort, 2)
			if err := m.LoadProgram(prog.Bytes()); err != nil {
				t.Fatal(err)
			}
			mustRun(t, m, 1)
			var file bytes.Buffer
			if err := m.SaveSnapshot(ctx, &file); err != nil {
				t.Fatal(err)
			}
			t.Logf("snapshot of %d MiB RAM: %d KiB", cfg.MemoryBytes>>20, file.Len()>>10)

			m2, err := LoadSnapshot(bytes.NewReader(file.Bytes()), mode.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			for _, step := range []string{"loaded", "ran on"} {
				h1, _ := m.RAMHash(ctx)
				h2, _ := m2.RAMHash(ctx)
				r1, _ := m.Regs()
				r2, _ := m2.Regs()
				if h1 != h2 || r1 != r2 || m.Scratch() != m2.Scratch() {
					t.Fatalf("%s: RAM %x/%x, RIP %#x/%#x RBX %#x/%#x, scratch %+v/%+v", step, h1[:6], h2[:6], r1.RIP, r2.RIP, r1.RBX, r2.RBX, m.Scratch(), m2.Scratch())
				}
				if step == "loaded" {
					mustRun(t, m, 2)
					mustRun(t, m2, 2)
				}
			}
		})
	}
}

// TestSnapshotFileBad: damaged or foreign snapshot files are refused with
// the reason, and nothing is left behind.
func TestSnapshotFileBad(t *testing.T) {
	ctx := context.Background()
	m := newVM(t, VMConfig{MemoryBytes: 8 << 20})
	if err := m.LoadProgram(new(x86asm.Asm).DirtyPages(DataAddr, 4).Out(DebugExitPort, 1).Bytes()); err != nil {
		t.Fatal(err)
	}
	mustRun(t, m, 1)
	var good bytes.Buffer
	if err := m.SaveSnapshot(ctx, &good); err != nil {
		t.Fatal(err)
	}
	flip := bytes.Clone(good.Bytes())
	flip[len(flip)/2] ^= 1
	var noRAM bytes.Buffer
	if err := fork.Encode(&noRAM, []fork.Section{{Name: secMachine, Data: make([]byte, 12)}}); err != nil {
		t.Fatal(err)
	}
	fds := countFDs(t)
	for _, tt := range []struct {
		name string
		file []byte
		cfg  VMConfig
		want error
	}{
		{"flipped bit", flip, VMConfig{}, fork.ErrCorrupt},
		{"truncated", good.Bytes()[:good.Len()-40], VMConfig{}, fork.ErrCorrupt},
		{"not a snapshot", []byte("hello, this is not a snapshot file at all"), VMConfig{}, fork.ErrIncompatibleFormat},
		{"missing sections", noRAM.Bytes(), VMConfig{}, fork.ErrCorrupt},
		{"other RAM size", good.Bytes(), VMConfig{MemoryBytes: 16 << 20}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m2, err := LoadSnapshot(bytes.NewReader(tt.file), tt.cfg)
			if err == nil {
				m2.Close()
				t.Fatal("loaded")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			t.Logf("%v", err)
		})
	}
	if got := countFDs(t); got != fds {
		t.Errorf("fds %d after failed loads, %d before", got, fds)
	}
}
