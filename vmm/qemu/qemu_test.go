package qemu_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestConformanceDevicesRestore runs the suite with 30 cycles: the 200 of
// the default are for the KVM backend, where the pattern once hung; on
// QEMU every explore test of the suite runs the same cycle hundreds of
// times, and 200 here cost 1.5–2 minutes of the test command (50 took
// 30 s on 2026-12-05).
func TestConformanceDevicesRestore(t *testing.T) {
	vmmtest.Run(t, func(ctx context.Context, cfg vmm.Config) (vmm.Machine, error) {
		cfg.Restore = vmm.RestoreDevices
		return qemu.Start(ctx, cfg)
	}, vmmtest.WithCycles(30))
}

// TestConformanceFullRestore runs in parallel with TestAgentChannel, after
// the package's sequential tests (those that count the process's fds and
// children, vmmtest.Leaks, among them): the package runs last in the
// README's test command, mostly alone on its 2 cores.
func TestConformanceFullRestore(t *testing.T) {
	t.Parallel()
	vmmtest.Run(t, func(ctx context.Context, cfg vmm.Config) (vmm.Machine, error) {
		cfg.Restore = vmm.RestoreFull
		return qemu.Start(ctx, cfg)
	}, vmmtest.WithCycles(10), // a full restore is O(RAM): fewer cycles than in devices mode
		vmmtest.Skip("the restore mode does not enter it: TestConformanceDevicesRestore runs it", "BootAndY2038", "HungGuestCleansUp"))
}

// TestKilledGuest kills QEMU in the middle of an operation: the call fails
// naming the dead guest, Close cleans up, nothing leaks.
func TestKilledGuest(t *testing.T) {
	env := vmmtest.Setup(t)
	cfg := env.Config(t, env.Lane(t, "ext2"))
	check := vmmtest.Leaks(t) // after the overlay: it is closed by t.Cleanup
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m, err := qemu.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	spin := vmmtest.SpinRequest(t, m)
	errc := make(chan error, 1)
	go func() {
		_, err := m.Call(ctx, spin)
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, vmm.ErrGuestDied) {
			t.Errorf("call during kill: %v, want ErrGuestDied", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("call did not return after the guest was killed")
	}
	if err := m.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	check()
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  vmm.Config
		want string
	}{
		{"no kernel", vmm.Config{Initramfs: "/nonexistent"}, "no kernel"},
		{"missing kernel", vmm.Config{Kernel: "/nonexistent/vmlinuz", Initramfs: "/x"}, "kernel"},
		{"bad restore mode", vmm.Config{Restore: "fast"}, "restore mode"},
		{"bad agent channel", vmm.Config{AgentChannel: "pipe"}, "agent channel"},
		{"too little memory", vmm.Config{MemoryMiB: 8}, "memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := qemu.Start(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestNoQEMU: without qemu-system-x86_64 on PATH, Start names the missing
// program and its Debian package, and leaves nothing behind.
func TestNoQEMU(t *testing.T) {
	dir := t.TempDir()
	kernel, initrd := dir+"/vmlinuz", dir+"/initramfs"
	for _, f := range []string{kernel, initrd} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", t.TempDir())
	check := vmmtest.Leaks(t)
	_, err := qemu.Start(context.Background(), vmm.Config{Kernel: kernel, Initramfs: initrd})
	if err == nil || !strings.Contains(err.Error(), "qemu-system-x86_64 not found") || !strings.Contains(err.Error(), "qemu-system-x86") {
		t.Errorf("Start without QEMU: %v", err)
	}
	check()
}
