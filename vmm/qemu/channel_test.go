package qemu_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestAgentChannel boots the real guest on each agent channel: the agent
// serves on the device the channel puts there (its ready line names it),
// and the channel carries 16 KiB each way across checkpoints and restores
// in both restore modes, so the host's socket and the port's
// host/guest-connected state survive a snapshot-load.
func TestAgentChannel(t *testing.T) {
	t.Parallel() // with TestConformanceFullRestore: no vmmtest.Leaks here
	env := vmmtest.Setup(t)
	tests := []struct {
		ch       vmm.AgentChannel
		mode     vmm.RestoreMode
		wantPath string // prefix
	}{
		{"", vmm.RestoreDevices, "/dev/vport"},
		{vmm.AgentVirtio, vmm.RestoreFull, "/dev/vport"},
		{vmm.AgentUART, vmm.RestoreDevices, "/dev/ttyS1"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s-%s", orDefault(string(tt.ch), "default"), tt.mode), func(t *testing.T) {
			cfg := env.Config(t, env.Lane(t, "ext2"))
			cfg.AgentChannel, cfg.Restore = tt.ch, tt.mode
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			m, err := qemu.Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := m.Close(); err != nil {
					t.Error(err)
				}
			}()
			if got := m.AgentPath(); !strings.HasPrefix(got, tt.wantPath) {
				t.Fatalf("agent serves on %q, want %s...", got, tt.wantPath)
			}
			checkRestores(ctx, t, m)
		})
	}
}

// checkRestores writes 16 KiB, checkpoints, overwrites, restores twice and
// reads the file back whole after each restore.
func checkRestores(ctx context.Context, t *testing.T, m *qemu.Machine) {
	vmmtest.Do(t, m, &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: "ext2", Device: "serial:lane0", Fstype: "ext2"}}})
	want := bytes.Repeat([]byte("0123456789abcdef"), 1024)
	write := func(data []byte) {
		vmmtest.Do(t, m, &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: "ext2", Path: "f", Flags: 0o1101, Data: data}}})
	}
	write(want)
	c, err := m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		write(bytes.Repeat([]byte{byte('x' + i)}, 3000))
		if err := m.Restore(ctx, c); err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		resp := vmmtest.Do(t, m, &agentv1.Request{Op: &agentv1.Request_ReadFile{ReadFile: &agentv1.ReadFile{Lane: "ext2", Path: "f", Length: int64(len(want)) + 1}}})
		if got := resp.GetReadFile().GetData(); !bytes.Equal(got, want) {
			t.Fatalf("after restore %d: read %d bytes (%.16q...), want the %d written before the checkpoint", i, len(got), got, len(want))
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
