package doctor

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/sandbox"
	"github.com/themisfs/themis/internal/scratch/scratchtest"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/vmm/qemu"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// TestCheckBackend checks that the report's backend is launch's auto
// choice for this host, reason included (the rule's table is
// launch.TestChoose).
func TestCheckBackend(t *testing.T) {
	t.Parallel()
	r := Check(context.Background(), t.TempDir())
	want, err := launch.Choose(launch.Probe(), launch.Auto)
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend != want.Backend || r.BackendWhy != want.Why {
		t.Errorf("Check: backend %q (%s); want %q (%s)", r.Backend, r.BackendWhy, want.Backend, want.Why)
	}
	if revert, why := exploration.Revert(want.Backend); r.Revert != revert || r.RevertWhy != why || why == "" {
		t.Errorf("Check: revert %q (%s); want %q (%s)", r.Revert, r.RevertWhy, revert, why)
	}
	if r.KVMKind == "" || r.KVMWhy == "" || r.KVMDevice != (r.KVMKind != "absent") || r.KVMHardware != (r.KVMKind == "hardware") {
		t.Errorf("Check: KVM %q (%s), device %v, hardware %v: inconsistent", r.KVMKind, r.KVMWhy, r.KVMDevice, r.KVMHardware)
	}
	if r.ExploreWorkers != exploration.AutoWorkerCount() || r.ExploreWorkers < 1 {
		t.Errorf("Check: explore workers %d, want %d", r.ExploreWorkers, exploration.AutoWorkerCount())
	}
	if iso := r.HostToolIsolation; (iso == "namespaces") != sandbox.Isolated() || (iso != "namespaces" && iso != "none: "+sandbox.Why()) {
		t.Errorf("Check: host tool isolation %q; sandbox isolated %v (%s)", iso, sandbox.Isolated(), sandbox.Why())
	}
}

// TestBootCheck runs doctor --boot's measurement on the real guest and
// checks the JSON a script would read.
func TestBootCheck(t *testing.T) {
	env := vmmtest.Setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := Check(ctx, env.CacheDir)
	b, err := BootCheck(ctx, BootOptions{
		Guest:    guest.Options{CacheDir: env.CacheDir, Log: zaptest.NewLogger(t)},
		Pings:    20,
		Restores: 3,
		Log:      zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Boot = b
	raw, err := jsonout.Encode(r.Proto(), false)
	if err != nil {
		t.Fatal(err)
	}
	var got themisv1.DoctorReport
	if err := jsonout.DecodeInto(raw, &got); err != nil {
		t.Fatal(err)
	}
	if g := got.GetBoot(); got.GetBackend() == "" || g.GetBootS() <= 0 || g.GetAgentRttS() <= 0 || g.GetCheckpointS() <= 0 ||
		g.GetRestoreS() <= 0 || !g.GetRestoreVerified() || g.GetY2038Set() == 0 || g.GetY2038Stored() != 1<<31-1 {
		t.Errorf("doctor --json: %s", raw)
	}
	if b.Y2038Stored != 1<<31-1 || b.Y2038OnDisk != 1<<31-1 {
		t.Errorf("Y2038 witness: set %d, guest %d, on disk %d; want both clamped to %d", b.Y2038Set, b.Y2038Stored, b.Y2038OnDisk, 1<<31-1)
	}
	if b.BootMs <= 0 || b.AgentRTTUs <= 0 || b.RestoreMs <= 0 {
		t.Errorf("timings not measured: %+v", b)
	}
}

func TestBootCheckBadBackend(t *testing.T) {
	t.Parallel()
	_, err := BootCheck(context.Background(), BootOptions{Backend: "bhyve"})
	if err == nil || !strings.Contains(err.Error(), `backend: "bhyve"`) {
		t.Fatalf("BootCheck with an unknown backend: %v", err)
	}
}

// TestBootCheckKVMNeedsHardware: asking for kvm where Linux cannot boot on
// /dev/kvm is refused before anything is built, naming the backend.
func TestBootCheckKVMNeedsHardware(t *testing.T) {
	t.Parallel()
	if launch.Probe().KVM == launch.KVMHardware {
		t.Skip("this host has hardware virtualization")
	}
	_, err := BootCheck(context.Background(), BootOptions{Backend: "kvm"})
	if err == nil || !strings.Contains(err.Error(), `backend: "kvm"`) || !strings.Contains(err.Error(), "cannot boot") {
		t.Fatalf("BootCheck with kvm on a host without hardware virtualization: %v", err)
	}
}

// TestScratchRoom: doctor reports the guest RAM dir's free space and calls
// less than one default guest a problem (small tmpfs mounts of known size).
func TestScratchRoom(t *testing.T) {
	small, big := scratchtest.Tmpfs(t, 8), scratchtest.Tmpfs(t, 256)
	tests := []struct {
		name    string
		dir     string
		wantMiB int64
		problem []string // in the problem; nil: none
	}{
		{"less than one guest", small, 8, []string{small, "8.0 MiB free", "default 128 MiB", "RESOURCE_EXHAUSTED", qemu.ScratchEnv}},
		{"room", big, 256, nil},
		{"no such dir", filepath.Join(small, "gone"), -1, []string{"statfs", "gone"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			free, problem := scratchRoom(tc.dir)
			if free != tc.wantMiB {
				t.Errorf("scratchRoom(%s): %d MiB free; want %d", tc.dir, free, tc.wantMiB)
			}
			if tc.problem == nil && problem != "" {
				t.Errorf("scratchRoom(%s): problem %q; want none", tc.dir, problem)
			}
			for _, s := range tc.problem {
				if !strings.Contains(problem, s) {
					t.Errorf("scratchRoom(%s): problem %q; want it to say %q", tc.dir, problem, s)
				}
			}
		})
	}
	r := Check(context.Background(), t.TempDir())
	if r.ScratchDir != qemu.ScratchDir() || r.ScratchFreeMiB < 0 {
		t.Errorf("Check: guest RAM dir %q with %d MiB free; want %q measured", r.ScratchDir, r.ScratchFreeMiB, qemu.ScratchDir())
	}
}
