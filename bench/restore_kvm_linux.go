package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/themisfs/themis/vmm/kvm"
	"github.com/themisfs/themis/vmm/kvm/x86asm"
)

// runTimeout bounds one run of the synthetic guest (10 000 pages take
// well under a millisecond).
const runTimeout = 10 * time.Second

// measureKVM measures one (RAM, pages) point on a fresh machine: load a
// program that dirties pages pages, checkpoint once (the arm), then
// iterations × (run → restore), and returns the medians and the arm.
func measureKVM(ctx context.Context, cfg kvm.VMConfig, pages, iterations int) (_ KVMRestore, _ armSample, err error) {
	p := KVMRestore{RAMBytes: cfg.MemoryBytes, Pages: pages}
	m, err := kvm.NewVM(cfg)
	if err != nil {
		return p, armSample{}, err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	if err := m.LoadProgram(x86asm.DirtyProgram(kvm.DebugExitPort, kvm.DataAddr, pages, kvmExitCode)); err != nil {
		return p, armSample{}, err
	}
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		return p, armSample{}, err
	}
	st := m.Stats()
	arm := armSample{ns: st.Arm.Nanoseconds(), bytes: st.ArmBytes}
	var total, harvest, copying, state, copied []int64
	for i := range iterations {
		rctx, cancel := context.WithTimeout(ctx, runTimeout)
		e, err := m.Run(rctx)
		cancel()
		if err != nil {
			return p, arm, fmt.Errorf("run %d: %w", i, err)
		}
		if e.Reason != kvm.ExitDebug || e.Code != kvmExitCode {
			return p, arm, fmt.Errorf("run %d: exit %v code %#x, want %v code %#x", i, e.Reason, e.Code, kvm.ExitDebug, kvmExitCode)
		}
		if err := m.Restore(ctx, c0); err != nil {
			return p, arm, err
		}
		s := m.Stats()
		if s.RestorePages < pages {
			return p, arm, fmt.Errorf("restore %d copied %d pages, want at least the %d dirtied", i, s.RestorePages, pages)
		}
		total = append(total, s.Restore.Nanoseconds())
		harvest = append(harvest, s.RestoreHarvest.Nanoseconds())
		copying = append(copying, s.RestoreCopy.Nanoseconds())
		state = append(state, s.RestoreState.Nanoseconds())
		copied = append(copied, int64(s.RestorePages))
	}
	p.RestoreNsMedian, p.RestoreNsP90 = median(total), percentile(total, 90)
	p.HarvestNs, p.CopyNs, p.StateNs = median(harvest), median(copying), median(state)
	p.PagesCopied = int(median(copied))
	return p, arm, nil
}
