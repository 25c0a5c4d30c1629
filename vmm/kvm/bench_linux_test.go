package kvm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/kvmtest"
	"github.com/themisfs/themis/vmm/kvm/x86asm"
	"github.com/themisfs/themis/vmm/vmmtest/cpbench"
)

// BenchmarkRestore: restore time against pages dirtied since the checkpoint,
// with 256 MiB and 2 GiB of guest RAM (the same dirty set: the time must not
// grow with RAM), in both dirty-tracking modes. Each iteration runs the
// guest (untimed), which dirties n pages, then restores (timed): harvesting
// the dirty log, copying the pages back and setting vCPU, irqchip, PIT and
// device state.
func BenchmarkRestore(b *testing.B) {
	ctx := context.Background()
	for _, mode := range dirtyModes {
		for _, ram := range []int64{256 << 20, 2 << 30} {
			for _, n := range []int{1, 10, 100, 1000, 10000} {
				b.Run(fmt.Sprintf("%s/ram=%dMiB/pages=%d", mode.name, ram>>20, n), func(b *testing.B) {
					cfg := mode.cfg
					cfg.MemoryBytes = ram
					m := newVM(b, cfg)
					if err := m.LoadProgram(new(x86asm.Asm).DirtyPages(DataAddr, n).Out(DebugExitPort, 1).Bytes()); err != nil {
						b.Fatal(err)
					}
					c0, err := m.Checkpoint(ctx)
					if err != nil {
						b.Fatal(err)
					}
					pages := 0
					var harvest, copying, state time.Duration
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						mustRun(b, m, 1)
						b.StartTimer()
						if err := m.Restore(ctx, c0); err != nil {
							b.Fatal(err)
						}
						pages += m.stats.RestorePages
						harvest += m.stats.RestoreHarvest
						copying += m.stats.RestoreCopy
						state += m.stats.RestoreState
					}
					b.ReportMetric(float64(pages)/float64(b.N), "pages/op")
					b.ReportMetric(float64(harvest.Nanoseconds())/float64(b.N), "harvest-ns/op")
					b.ReportMetric(float64(copying.Nanoseconds())/float64(b.N), "copy-ns/op")
					b.ReportMetric(float64(state.Nanoseconds())/float64(b.N), "state-ns/op")
				})
			}
		}
	}
}

// BenchmarkCheckpoint: checkpoint time against pages dirtied since the
// previous one (state save plus the page delta).
func BenchmarkCheckpoint(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("pages=%d", n), func(b *testing.B) {
			m := newVM(b, VMConfig{MemoryBytes: 256 << 20})
			if err := m.LoadProgram(new(x86asm.Asm).DirtyPages(DataAddr, n).Out(DebugExitPort, 1).Bytes()); err != nil {
				b.Fatal(err)
			}
			cpbench.Checkpoint(b, m, func() { mustRun(b, m, 1) })
		})
	}
}

// BenchmarkArm: the one-time root copy at the first checkpoint. "sparse" is
// a fresh guest (only the page tables and code are populated: the copy
// follows the memfd's data ranges); "full" has every page of RAM written
// first.
func BenchmarkArm(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		ram  int64
		full bool
	}{{256 << 20, false}, {2 << 30, false}, {256 << 20, true}} {
		name := fmt.Sprintf("ram=%dMiB/sparse", tc.ram>>20)
		if tc.full {
			name = fmt.Sprintf("ram=%dMiB/full", tc.ram>>20)
		}
		b.Run(name, func(b *testing.B) {
			var copied int64
			for range b.N {
				b.StopTimer()
				kvmtest.Need(b)
				m, err := NewVM(VMConfig{MemoryBytes: tc.ram})
				if err != nil {
					b.Fatal(err)
				}
				if tc.full {
					mem := m.RAM()
					for off := DataAddr; off < len(mem); off += PageSize {
						mem[off] = 1
					}
				}
				b.StartTimer()
				if _, err := m.Checkpoint(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				copied += m.stats.ArmBytes
				if err := m.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(copied)/float64(b.N)/(1<<20), "MiB-copied/op")
		})
	}
}
