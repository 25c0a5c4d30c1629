package qemu_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestCorruptStateRefused damages the state image of a real guest's
// checkpoints (where snapshot-save keeps its device state) between a
// checkpoint and its restore: a bit flipped in its middle, or its last 4
// KiB cut off. The restore is refused with vmm.ErrCorrupt naming the image,
// before anything changed: the guest runs on and answers, the machine is
// not broken (a later checkpoint is refused the same way, never saved on
// top), and Close leaves nothing. Before the checksum, QEMU's snapshot-load
// read what it found.
func TestCorruptStateRefused(t *testing.T) {
	env := vmmtest.Setup(t)
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"bit flip", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x10
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()-4096); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := env.Config(t, env.Lane(t, "ext2"))
			check := vmmtest.Leaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			m, err := qemu.Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			id, err := m.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			mkdir := &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "/tmp/after", Mode: 0o755}}}
			if _, err := m.Call(ctx, mkdir); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(m.StatePath())
			if err != nil {
				t.Fatal(err)
			}
			tt.damage(t, m.StatePath())
			t0 := time.Now()
			err = m.Restore(ctx, id)
			t.Logf("state image %d bytes; restore after the damage: %v in %v", fi.Size(), err, time.Since(t0).Round(time.Millisecond))
			if !errors.Is(err, vmm.ErrCorrupt) || errors.Is(err, vmm.ErrBroken) || !strings.Contains(err.Error(), m.StatePath()) {
				t.Errorf("restore of a damaged state image: %v; want vmm.ErrCorrupt naming %s, not ErrBroken", err, m.StatePath())
			}
			ping := &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
			if _, err := m.Call(ctx, ping); err != nil {
				t.Errorf("the guest after the refused restore: %v, want it running", err)
			}
			if _, err := m.Checkpoint(ctx); !errors.Is(err, vmm.ErrCorrupt) {
				t.Errorf("a checkpoint on the damaged image: %v, want vmm.ErrCorrupt", err)
			}
			if err := m.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			check()
		})
	}
}
