package qemu_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
	"github.com/themisfs/themis/vmm/vmmtest"
	"github.com/themisfs/themis/vmm/vmmtest/cpbench"
)

// BenchmarkRestore times restores to one checkpoint after a small write
// (the DFS pattern), for both memory restore paths side by side. It reports
// the median beside Go's mean. Verify is off: this is the production path.
func BenchmarkRestore(b *testing.B) {
	env := vmmtest.Setup(b)
	for _, mode := range []vmm.RestoreMode{vmm.RestoreFull, vmm.RestoreDevices} {
		b.Run(string(mode), func(b *testing.B) {
			cfg := env.Config(b, env.Lane(b, "ext2"))
			cfg.Restore, cfg.Verify = mode, false
			m := boot(b, cfg)
			mustDo(b, m, &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: "ext2", Device: "serial:lane0", Fstype: "ext2"}}})
			ctx := context.Background()
			c0, err := m.Checkpoint(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var times, ram []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				mustDo(b, m, &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: "ext2", Path: fmt.Sprintf("f%d", i%4), Flags: 0o101, Size: 4096, Fill: 0x55}}})
				b.StartTimer()
				t0 := time.Now()
				if err := m.Restore(ctx, c0); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(t0))
				ram = append(ram, m.Timings().RestoreRAM)
			}
			b.StopTimer()
			b.ReportMetric(medianMs(times), "ms-median")
			b.ReportMetric(medianMs(ram), "ms-ram-median")
		})
	}
}

// BenchmarkCheckpoint times checkpoints, each followed by a restore to its parent.
func BenchmarkCheckpoint(b *testing.B) {
	env := vmmtest.Setup(b)
	for _, mode := range []vmm.RestoreMode{vmm.RestoreFull, vmm.RestoreDevices} {
		b.Run(string(mode), func(b *testing.B) {
			cfg := env.Config(b, env.Lane(b, "ext2"))
			cfg.Restore, cfg.Verify = mode, false
			m := boot(b, cfg)
			cpbench.Checkpoint(b, m, nil)
		})
	}
}

// BenchmarkAgentRoundTrip times a no-op request to the guest agent on
// each agent channel (`themisctl bench channel` puts them side by side
// with larger requests and after restores).
func BenchmarkAgentRoundTrip(b *testing.B) {
	env := vmmtest.Setup(b)
	for _, ch := range []vmm.AgentChannel{vmm.AgentUART, vmm.AgentVirtio} {
		b.Run(string(ch), func(b *testing.B) {
			cfg := env.Config(b)
			cfg.AgentChannel = ch
			m := boot(b, cfg)
			ping := &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
			var times []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				mustDo(b, m, ping)
				times = append(times, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "us-median")
		})
	}
}

func medianMs(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1e3
}

func boot(b *testing.B, cfg vmm.Config) *qemu.Machine {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m, err := qemu.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := m.Close(); err != nil {
			b.Error(err)
		}
	})
	return m
}

func mustDo(b *testing.B, m vmm.Machine, req *agentv1.Request) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := m.Call(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if err := agent.ResponseError(resp); err != nil {
		b.Fatal(err)
	}
}
