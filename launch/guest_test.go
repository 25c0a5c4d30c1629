package launch

import (
	"context"
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap/zaptest"
)

// fakeMachine answers every call with success (or mountErrno to Mount)
// and records the config it was started with and the mounts it got.
type fakeMachine struct {
	cfg        vmm.Config
	mounts     []*agentv1.Mount
	mountErrno int32
	closed     int
}

func (f *fakeMachine) Call(_ context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if m := req.GetMount(); m != nil {
		f.mounts = append(f.mounts, m)
		return &agentv1.Response{Errno: f.mountErrno}, nil
	}
	return &agentv1.Response{}, nil
}
func (f *fakeMachine) Checkpoint(context.Context) (vmm.CheckpointID, error) { return 0, nil }
func (f *fakeMachine) Restore(context.Context, vmm.CheckpointID) error      { return nil }
func (f *fakeMachine) Delete(context.Context, vmm.CheckpointID) error       { return nil }
func (f *fakeMachine) Checkpoints() []vmm.CheckpointID                      { return nil }
func (f *fakeMachine) Disks() []vmm.Disk                                    { return f.cfg.Disks }
func (f *fakeMachine) Close() error                                         { f.closed++; return nil }

var _ vmm.Machine = (*fakeMachine)(nil)

// backends is a backendStart double: the backends in fail fail to boot,
// the others start a fakeMachine; it records the order tried.
type backends struct {
	fail  map[string]bool
	tried []string
	mach  *fakeMachine
}

func (b *backends) start(_ context.Context, c Choice, cfg vmm.Config) (vmm.Machine, error) {
	b.tried = append(b.tried, c.Backend)
	if c.Backend == None {
		return nil, ErrNoBackend
	}
	if b.fail[c.Backend] {
		return nil, errors.New(c.Backend + " boot failed")
	}
	b.mach = &fakeMachine{cfg: cfg}
	return b.mach, nil
}

func laneSpecs(t *testing.T, specs ...string) []guest.LaneSpec {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext2"); err != nil {
		t.Skipf("mkfs.ext2 not installed (e2fsprogs): %v", err)
	}
	lanes, err := guest.ParseLaneSpecs(strings.Join(specs, ","))
	if err != nil {
		t.Fatal(err)
	}
	return lanes
}

// TestBootBackends checks which backend Boot tries, in which order, and
// what it records: auto's fallback from KVM to QEMU, none for an asked
// backend, ErrNoBackend for None.
func TestBootBackends(t *testing.T) {
	cache := t.TempDir()
	lanes := laneSpecs(t, "ext2")
	tests := []struct {
		name       string
		choice     Choice
		fail       []string
		wantTried  []string
		wantBooted string
		wantErr    bool
		wantKVMErr bool
	}{
		{"qemu", Choice{Backend: QEMU}, nil, []string{QEMU}, QEMU, false, false},
		{"kvm", Choice{Backend: KVM}, nil, []string{KVM}, KVM, false, false},
		{"auto kvm", Choice{Backend: KVM, Fallback: true}, nil, []string{KVM}, KVM, false, false},
		{"auto kvm falls back", Choice{Backend: KVM, Fallback: true}, []string{KVM}, []string{KVM, QEMU}, QEMU, false, true},
		{"asked kvm does not fall back", Choice{Backend: KVM}, []string{KVM}, []string{KVM}, "", true, false},
		{"both fail", Choice{Backend: KVM, Fallback: true}, []string{KVM, QEMU}, []string{KVM, QEMU}, "", true, false},
		{"none", Choice{Backend: None}, nil, []string{None}, "", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &backends{fail: map[string]bool{}}
			for _, f := range tt.fail {
				b.fail[f] = true
			}
			g, err := boot(context.Background(), Spec{Image: &guest.Image{Kernel: "k", Initramfs: "i"}, MakeBase: baseimage.Make, CacheDir: cache,
				Lanes: lanes, Backend: tt.choice, Log: zaptest.NewLogger(t)}, b.start)
			if !reflect.DeepEqual(b.tried, tt.wantTried) {
				t.Errorf("tried %v, want %v", b.tried, tt.wantTried)
			}
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Boot succeeded on %s; want an error", g.Backend)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if g.Backend != tt.wantBooted || (g.KVMFailure != nil) != tt.wantKVMErr {
				t.Errorf("booted %q, KVM failure %v; want %q, failure %v", g.Backend, g.KVMFailure, tt.wantBooted, tt.wantKVMErr)
			}
		})
	}
}

// TestBootAssembles checks the disks, serials, config and mounts Boot
// assembles for a plain and an overlay lane, and that Close releases them
// once.
func TestBootAssembles(t *testing.T) {
	lanes := laneSpecs(t, "ext2", "overlay:name=ov")
	var mach *fakeMachine
	start := func(_ context.Context, cfg vmm.Config) (vmm.Machine, error) {
		mach = &fakeMachine{cfg: cfg}
		return mach, nil
	}
	g, err := Boot(context.Background(), Spec{Image: &guest.Image{Kernel: "k", Initramfs: "i"}, MakeBase: baseimage.Make, CacheDir: t.TempDir(),
		Lanes: lanes, MemoryMiB: 256, Restore: vmm.RestoreFull, Verify: true, Backend: Choice{Backend: QEMU}, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	if g.Backend != QEMU || g.Machine != mach {
		t.Errorf("Guest backend %q, machine %v; want qemu and the started machine", g.Backend, g.Machine)
	}
	cfg := mach.cfg
	if cfg.Kernel != "k" || cfg.Initramfs != "i" || cfg.MemoryMiB != 256 || cfg.Restore != vmm.RestoreFull || !cfg.Verify {
		t.Errorf("config %+v", cfg)
	}
	var serials []string
	for _, d := range cfg.Disks {
		serials = append(serials, d.Serial)
	}
	if want := []string{"lane0", "lane1", "lower1"}; !reflect.DeepEqual(serials, want) {
		t.Errorf("serials %v, want %v", serials, want)
	}
	if len(g.Lanes) != 2 || g.Lanes[0].Lower != nil || g.Lanes[1].Lower == nil || cfg.Disks[2].Device != g.Lanes[1].Lower {
		t.Errorf("lanes %+v", g.Lanes)
	}
	want := []*agentv1.Mount{
		{Lane: "ext2", Device: "serial:lane0", Fstype: "ext2"},
		{Lane: "ov", Device: "serial:lane1", LowerDevice: "serial:lower1", Fstype: "overlay", LayerFstype: "ext2", Options: OverlayMountOptions},
	}
	if len(mach.mounts) != len(want) {
		t.Fatalf("mounts %v, want %v", mach.mounts, want)
	}
	for i := range want {
		if got := mach.mounts[i]; got.String() != want[i].String() {
			t.Errorf("mount %d: %v, want %v", i, got, want[i])
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil || mach.closed != 1 {
		t.Errorf("second Close: %v, machine closed %d times; want nil, once", err, mach.closed)
	}
}

// TestBootMountFails checks that a failed mount fails Boot, names the
// lane, and closes the machine.
func TestBootMountFails(t *testing.T) {
	lanes := laneSpecs(t, "ext2")
	var mach *fakeMachine
	start := func(_ context.Context, cfg vmm.Config) (vmm.Machine, error) {
		mach = &fakeMachine{cfg: cfg, mountErrno: int32(syscall.EINVAL)}
		return mach, nil
	}
	_, err := Boot(context.Background(), Spec{Image: &guest.Image{}, MakeBase: baseimage.Make, CacheDir: t.TempDir(), Lanes: lanes, Start: start})
	if err == nil || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Boot with a failing mount: %v; want EINVAL", err)
	}
	if mach.closed != 1 {
		t.Errorf("machine closed %d times after a failed mount, want 1", mach.closed)
	}
}

func TestBootNeedsImageAndMakeBase(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		spec Spec
		want string
	}{
		{Spec{MakeBase: baseimage.Make}, "Spec.Image is required"},
		{Spec{Image: &guest.Image{}}, "Spec.MakeBase is required"},
	} {
		if _, err := Boot(context.Background(), tt.spec); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Boot(%+v) = %v, want %q", tt.spec, err, tt.want)
		}
	}
}
