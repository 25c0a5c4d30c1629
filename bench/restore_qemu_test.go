package bench

import (
	"context"
	"testing"
	"time"

	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// TestMeasureQEMU runs the QEMU part of Restore on a real guest with a few
// iterations and checks the row's shape, not its speed.
func TestMeasureQEMU(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := measureQEMU(ctx, RestoreOptions{CacheDir: env.CacheDir, Iterations: 3, Log: zaptest.NewLogger(t)}, launch.Probe())
	if err != nil {
		t.Fatal(err)
	}
	if q.Skipped != "" || q.MemoryMiB != qemuMemoryMiB || q.RestoreNsMedian <= 0 || q.RAMNsMedian <= 0 || q.RAMNsMedian > q.RestoreNsMedian {
		t.Errorf("qemu row %+v", q)
	}
}

// TestMeasureQEMUSkips: without QEMU the row is skipped with the reason,
// not an error.
func TestMeasureQEMUSkips(t *testing.T) {
	t.Parallel()
	q, err := measureQEMU(context.Background(), RestoreOptions{Iterations: 1}, launch.Host{KVM: launch.KVMAbsent})
	if err != nil || q.Skipped == "" {
		t.Fatalf("measureQEMU without QEMU: %+v, %v; want skipped with a reason", q, err)
	}
}
