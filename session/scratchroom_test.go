package session_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// TestCreateNoRoomForRAM: a boot the host has no room for the guest's RAM
// for (vmm.ErrNoRAM, as vmm/qemu returns it for a full tmpfs) fails that
// Create with ErrExhausted (RESOURCE_EXHAUSTED at the API) keeping the
// message that names the dir and its free space, frees its slot, and the
// next Create boots. Before, it was a plain boot error (INTERNAL).
func TestCreateNoRoomForRAM(t *testing.T) {
	if _, err := exec.LookPath("mke2fs"); err != nil {
		t.Skip("mke2fs not installed (e2fsprogs)")
	}
	noRoom := fmt.Errorf("qemu: guest RAM file: /dev/shm has 7.9 MiB free, less than the guest's 128.0 MiB: %w", vmm.ErrNoRAM)
	var boots atomic.Int32
	m, err := session.Open(context.Background(), session.Config{StateDir: t.TempDir(), CacheDir: t.TempDir(),
		MakeBase: baseimage.Make, Image: &guest.Image{}, MaxSessions: 1, Log: zaptest.NewLogger(t),
		Start: func(context.Context, vmm.Config) (vmm.Machine, error) {
			if boots.Add(1) == 1 {
				return nil, noRoom
			}
			return &sessiontest.Machine{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	opts := session.CreateOptions{Lanes: []string{"ext2"}, Backend: "qemu"}
	_, err = m.Create(ctx, opts)
	if !errors.Is(err, errkind.ErrExhausted) || !errors.Is(err, vmm.ErrNoRAM) || !strings.Contains(err.Error(), "/dev/shm has 7.9 MiB free") {
		t.Fatalf("Create without room for guest RAM: %v; want ErrExhausted wrapping vmm.ErrNoRAM, naming the dir and its free space", err)
	}
	info, err := m.Create(ctx, opts)
	if err != nil {
		t.Fatalf("Create after a refused one (max_sessions 1): %v", err)
	}
	if info.State != session.StateRunning {
		t.Errorf("second session %s", info.State)
	}
}
