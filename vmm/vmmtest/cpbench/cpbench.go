package cpbench

import (
	"context"
	"testing"

	"github.com/themisfs/themis/vmm"
)

// Checkpointer is what Checkpoint times: a vmm.Machine, or the KVM
// backend's bare kvm.VM.
type Checkpointer interface {
	Checkpoint(ctx context.Context) (vmm.CheckpointID, error)
	Restore(ctx context.Context, id vmm.CheckpointID) error
}

// Checkpoint times m's checkpoints, b.N of them, each taken from
// the state of a first checkpoint after dirty (the guest's writes in
// between; nil: none) and restored to it after: neither dirty nor the
// restore is timed.
func Checkpoint(b *testing.B, m Checkpointer, dirty func()) {
	ctx := context.Background()
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if dirty != nil {
			b.StopTimer()
			dirty()
			b.StartTimer()
		}
		if _, err := m.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.Restore(ctx, c0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
