package launch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
)

// ErrNoBackend is returned by Boot for the None choice.
var ErrNoBackend = errors.New("launch: no usable backend")

// StartFunc boots a machine from a config: a backend's Start, or a test
// double.
type StartFunc func(ctx context.Context, cfg vmm.Config) (vmm.Machine, error)

// Spec describes a guest to assemble.
type Spec struct {
	// Image is the guest kernel and agent initramfs (guest.Build). Required.
	Image *guest.Image
	// MakeBase makes (or finds in its cache) a lane's base image:
	// baseimage.Make outside tests. Required.
	MakeBase BaseMaker
	// CacheDir is the base image cache, passed to MakeBase ("" is its
	// default).
	CacheDir string
	// Lanes are the filesystems under test, one disk each (two for an
	// overlay lane), mounted in order as /lanes/<Name>.
	Lanes []guest.LaneSpec
	// MemoryMiB is guest RAM in MiB (0: the backend's default, 128).
	MemoryMiB int
	// Charger, when set, is billed for the sectors every lane's overlay
	// holds (overlay.Device.SetCharger), from before the machine starts.
	Charger overlay.Charger
	// Restore, Verify, AgentChannel, ICount and WarnNotFatal are
	// vmm.Config's.
	Restore      vmm.RestoreMode
	Verify       bool
	AgentChannel vmm.AgentChannel
	ICount       bool
	WarnNotFatal bool
	// Spares attaches, after the lanes' disks, a spare disk per plain
	// (not overlay) lane over the lane's base image (serial
	// SpareSerial(i)), never mounted at boot: a crash run mirrors a crash
	// state into it (overlay.Device.Mirror) and mounts it in the guest.
	Spares bool
	// Backend is the choice to boot on (Choose).
	Backend Choice
	// Start, when set, boots the machine instead of Backend's backend (a
	// test double, or the backend under test in the conformance suite);
	// Backend is then only recorded in Guest.Backend.
	Start StartFunc
	// Log is the machine's logger and receives the fallback warning (nil:
	// none).
	Log *zap.Logger
}

// BaseMaker returns the path of spec's base image in the cache at cacheDir,
// making it if it is not there; the image is shared and read-only, and for
// an overlay lane it is its upper layer's. baseimage.Make is the one;
// launch and session take it as a parameter so that they do not reach
// what making base images needs (mkfs, the btrfs rewriter).
type BaseMaker func(ctx context.Context, cacheDir string, spec guest.LaneSpec) (string, error)

// Lane is one assembled lane: its spec and its disks.
type Lane struct {
	Spec guest.LaneSpec
	// Disk is the lane's disk (serial LaneSerial(i)); for an overlay lane,
	// its upper layer's (the one that changes).
	Disk *overlay.Device
	// Lower is an overlay lane's lower-layer disk (serial LowerSerial(i),
	// mounted read-only in the guest); nil for other lanes.
	Lower *overlay.Device
	// Spare is a plain lane's spare disk (Spec.Spares; serial
	// SpareSerial(i), over the lane's base image); nil when none.
	Spare *overlay.Device
}

// Guest is a booted guest with every lane mounted. It owns its machine and
// overlays.
type Guest struct {
	// Machine is the running guest (nil after Close).
	Machine vmm.Machine
	// Backend is the backend that booted: KVM or QEMU (with Spec.Start,
	// Spec.Backend.Backend).
	Backend string
	// KVMFailure is the KVM boot's error where auto fell back to QEMU;
	// nil otherwise.
	KVMFailure error
	// Lanes are the lanes in Spec order.
	Lanes []Lane
	// StartTime is how long starting the machine took, to agent-ready
	// (both boots where auto fell back), without opening the disks or
	// mounting the lanes.
	StartTime time.Duration
}

// Boot assembles and boots a guest: an overlay over a fresh copy of each
// lane's base image, serials lane<i> (and lower<i>), the machine started on
// s.Backend (or s.Start), and every lane mounted. On error everything it
// opened is closed again.
func Boot(ctx context.Context, s Spec) (*Guest, error) {
	return boot(ctx, s, startOn)
}

// backendStart boots cfg on a chosen backend (startOn; tests pass a double).
type backendStart func(ctx context.Context, c Choice, cfg vmm.Config) (vmm.Machine, error)

// boot is Boot with the backends' start given.
func boot(ctx context.Context, s Spec, on backendStart) (_ *Guest, err error) {
	if s.Image == nil {
		return nil, errors.New("launch: Spec.Image is required")
	}
	if s.MakeBase == nil {
		return nil, errors.New("launch: Spec.MakeBase is required")
	}
	log := s.Log
	if log == nil {
		log = zap.NewNop()
	}
	g := &Guest{}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
		}
	}()
	cfg := vmm.Config{Kernel: s.Image.Kernel, Initramfs: s.Image.Initramfs, MemoryMiB: s.MemoryMiB,
		Restore: s.Restore, Verify: s.Verify, AgentChannel: s.AgentChannel, ICount: s.ICount, WarnNotFatal: s.WarnNotFatal, Log: s.Log}
	if cfg.Disks, err = g.openLanes(ctx, s); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := g.start(ctx, s, cfg, on, log); err != nil {
		return nil, err
	}
	g.StartTime = time.Since(t0)
	if err := g.mountLanes(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// openLanes opens every lane's disks, billed to s.Charger, and returns
// them in attach order.
func (g *Guest) openLanes(ctx context.Context, s Spec) ([]vmm.Disk, error) {
	var disks []vmm.Disk
	open := func(sp guest.LaneSpec) (*overlay.Device, error) {
		dev, err := OpenDisk(ctx, s.MakeBase, s.CacheDir, sp)
		if err != nil || s.Charger == nil {
			return dev, err
		}
		if err := dev.SetCharger(s.Charger); err != nil {
			return nil, errors.Join(err, closeDisk(dev))
		}
		return dev, nil
	}
	for i, sp := range s.Lanes {
		lane := Lane{Spec: sp}
		dev, err := open(sp)
		if err != nil {
			return nil, fmt.Errorf("lane %s: %w", sp.Name, err)
		}
		lane.Disk = dev
		g.Lanes = append(g.Lanes, lane)
		disks = append(disks, vmm.Disk{Serial: LaneSerial(i), Device: dev})
		if !sp.IsOverlay() {
			continue
		}
		// The upper layer starts empty; the lower layer holds the lane's
		// seed tree, if any (the same image without one).
		lower, err := open(sp.Lower())
		if err != nil {
			return nil, fmt.Errorf("lane %s: lower layer: %w", sp.Name, err)
		}
		g.Lanes[i].Lower = lower
		disks = append(disks, vmm.Disk{Serial: LowerSerial(i), Device: lower})
	}
	if !s.Spares {
		return disks, nil
	}
	for i := range g.Lanes {
		if g.Lanes[i].Spec.IsOverlay() {
			continue
		}
		spare, err := open(g.Lanes[i].Spec)
		if err != nil {
			return nil, fmt.Errorf("lane %s: spare disk: %w", g.Lanes[i].Spec.Name, err)
		}
		g.Lanes[i].Spare = spare
		disks = append(disks, vmm.Disk{Serial: SpareSerial(i), Device: spare})
	}
	return disks, nil
}

// OpenDisk returns a fresh overlay over spec's base image (makeBase's;
// for an overlay lane its upper layer's). The caller closes it.
func OpenDisk(ctx context.Context, makeBase BaseMaker, cacheDir string, spec guest.LaneSpec) (*overlay.Device, error) {
	base, err := makeBase(ctx, cacheDir, spec)
	if err != nil {
		return nil, fmt.Errorf("base image: %w", err)
	}
	dev, err := overlay.Open(base)
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	return dev, nil
}

// start boots the machine: s.Start where set, else s.Backend's backend,
// falling back from KVM to QEMU where s.Backend.Fallback.
func (g *Guest) start(ctx context.Context, s Spec, cfg vmm.Config, on backendStart, log *zap.Logger) error {
	g.Backend = s.Backend.Backend
	if s.Start != nil {
		m, err := s.Start(ctx, cfg)
		if err != nil {
			return err
		}
		g.Machine = m
		return nil
	}
	m, err := on(ctx, s.Backend, cfg)
	if err != nil && s.Backend.Backend == KVM && s.Backend.Fallback {
		log.Warn("KVM boot failed; auto falls back to QEMU", zap.Error(err))
		g.Backend, g.KVMFailure = QEMU, err
		m, err = on(ctx, Choice{Backend: QEMU}, cfg)
	}
	if err != nil {
		return err
	}
	g.Machine = m
	return nil
}

// mountLanes mounts every lane through the agent.
func (g *Guest) mountLanes(ctx context.Context) error {
	for i, l := range g.Lanes {
		req := &agentv1.Request{Op: &agentv1.Request_Mount{Mount: Mount(i, l.Spec)}}
		resp, err := g.Machine.Call(ctx, req)
		if err != nil {
			return fmt.Errorf("mount lane %s: %w", l.Spec.Name, err)
		}
		if err := agent.ResponseError(resp); err != nil {
			return fmt.Errorf("mount lane %s: %w", l.Spec.Name, err)
		}
	}
	return nil
}

// Close stops the machine and closes every overlay. Idempotent.
func (g *Guest) Close() error {
	var errs []error
	if g.Machine != nil {
		if err := g.Machine.Close(); err != nil {
			errs = append(errs, fmt.Errorf("launch: close machine: %w", err))
		}
		g.Machine = nil
	}
	for _, l := range g.Lanes {
		errs = append(errs, closeDisk(l.Disk), closeDisk(l.Lower), closeDisk(l.Spare))
	}
	g.Lanes = nil
	return errors.Join(errs...)
}

func closeDisk(d *overlay.Device) error {
	if d == nil {
		return nil
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("launch: close overlay: %w", err)
	}
	return nil
}

// OverlayMountOptions are the overlayfs options of an overlay lane: every
// feature that would leave metadata in the upper layer that the from-below
// classification does not read is off. metacopy=off is explicit (the agent
// refuses metacopy=on: the upper layer would record empty files);
// redirect_dir=off makes renaming a lower directory fail with EXDEV instead
// of writing a redirect xattr; index=off keeps hard-link copy-up out of the
// work directory's index.
const OverlayMountOptions = "metacopy=off,redirect_dir=off,index=off"

// LaneSerial and LowerSerial are the disk serials of lane i and of its
// lower layer (overlay lanes).
func LaneSerial(i int) string  { return fmt.Sprintf("lane%d", i) }
func LowerSerial(i int) string { return fmt.Sprintf("lower%d", i) }

// SpareSerial is the serial of lane i's spare disk (Spec.Spares).
func SpareSerial(i int) string { return fmt.Sprintf("spare%d", i) }

// Mount is the agent Mount request of lane i: its disk with the lane's
// mount options (guest.LaneSpec.MountOptions), or for an overlay lane its
// upper (lane<i>) and lower (lower<i>) disks with OverlayMountOptions.
func Mount(i int, sp guest.LaneSpec) *agentv1.Mount {
	m := &agentv1.Mount{Lane: sp.Name, Device: "serial:" + LaneSerial(i), Fstype: sp.FS, Options: sp.MountOptions()}
	if sp.IsOverlay() {
		m.LowerDevice = "serial:" + LowerSerial(i)
		m.LayerFstype = sp.Layer().FS
		m.Options = OverlayMountOptions
	}
	return m
}

// SpareMount is the agent Mount request of lane i's spare disk
// (Spec.Spares): at lane SpareLane(sp.Name), with the lane's filesystem
// and options.
func SpareMount(i int, sp guest.LaneSpec) *agentv1.Mount {
	return &agentv1.Mount{Lane: SpareLane(sp.Name), Device: "serial:" + SpareSerial(i), Fstype: sp.FS, Options: sp.MountOptions()}
}

// SpareLane is the agent lane a spare disk of lane is mounted at: a name
// no lane spec makes (":" is not in them).
func SpareLane(lane string) string { return "crash:" + lane }
