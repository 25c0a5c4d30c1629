package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/internal/budget"
	"github.com/themisfs/themis/internal/sandbox"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
	"go.uber.org/zap"
)

// Tool is one host program Themis uses.
type Tool struct {
	Name    string
	Path    string
	Package string
	Found   bool
}

// Report is what doctor found; --json prints it as Proto.
type Report struct {
	KVMDevice    bool
	KVMHardware  bool
	KVMKind      string // "hardware", "pvm", "absent"
	KVMWhy       string
	QEMU         string
	QEMUVersion  string
	Tools        []Tool
	CacheDir     string
	CachedImages int
	Backend      string
	BackendWhy   string
	// Revert is the explore revert strategy auto picks on Backend, and why.
	Revert    string
	RevertWhy string
	// ExploreWorkers is how many workers an explore run gets by default
	// here (exploration.AutoWorkerCount: one per CPU, at most 8; fewer
	// when the daemon has no room for them).
	ExploreWorkers int
	// HostToolIsolation is how the host checkers (e2fsck, btrfs check,
	// debugfs) run over guest-written images: "namespaces", or "none: "
	// and why (internal/sandbox).
	HostToolIsolation string
	// Lanes are the lane filesystems this host and image can run, and
	// why not for the rest.
	Lanes []Lane
	// ScratchDir is where QEMU guests keep their RAM (qemu.ScratchDir:
	// $THEMIS_SCRATCH_DIR, else /dev/shm) and ScratchFreeMiB its free
	// space, in MiB (-1: unknown, see Problems). Less than one guest of
	// vmm.DefaultMemoryMiB is a problem: such a session is refused.
	ScratchDir     string
	ScratchFreeMiB int64
	// Boot is set by --boot.
	*Boot
	BootError string
	Problems  []string
}

// Boot holds the measurements of a booted guest.
type Boot struct {
	BootBackend     string
	KernelVersion   string
	ImageCached     bool
	ImageMs         float64
	BootMs          float64
	AgentRTTUs      float64
	CheckpointMs    float64
	RestoreMs       float64
	RestoreMode     string
	RestoreVerified bool
	Y2038Set        int64
	Y2038Stored     int64
	Y2038OnDisk     int64
	Y2038Lane       string
}

var tools = []Tool{
	{Name: "qemu-system-x86_64", Package: "qemu-system-x86"},
	{Name: "qemu-img", Package: "qemu-utils"},
	{Name: "mkfs.ext2", Package: "e2fsprogs"},
	{Name: "mkfs.ext4", Package: "e2fsprogs"},
	{Name: "e2fsck", Package: "e2fsprogs"},
	{Name: "debugfs", Package: "e2fsprogs"},
	{Name: "mkfs.vfat", Package: "dosfstools"},
	{Name: "mkfs.btrfs", Package: "btrfs-progs"},
	{Name: "btrfs", Package: "btrfs-progs"},
	{Name: "mkfs.xfs", Package: "xfsprogs"},
	{Name: "xfs_repair", Package: "xfsprogs"},
	{Name: "mkfs.exfat", Package: "exfatprogs"},
	{Name: "tune.exfat", Package: "exfatprogs"},
	{Name: "fsck.exfat", Package: "exfatprogs"},
	{Name: "mkfs.udf", Package: "udftools"},
	{Name: "mkfs.f2fs", Package: "f2fs-tools"},
	{Name: "fsck.f2fs", Package: "f2fs-tools"},
	{Name: "mkfs.nilfs2", Package: "nilfs-tools"},
	{Name: "mkfs.minix", Package: "util-linux"},
	{Name: "fsck.minix", Package: "util-linux"},
	{Name: "dpkg-deb", Package: "dpkg"},
	{Name: "apt-get", Package: "apt"},
}

// Check inspects the host without starting anything.
func Check(ctx context.Context, cacheDir string) *Report {
	r := &Report{CacheDir: cacheDir}
	host := launch.Probe()
	r.KVMKind, r.KVMWhy = string(host.KVM), host.KVMWhy
	r.KVMDevice = host.KVM != launch.KVMAbsent
	r.KVMHardware = host.KVM == launch.KVMHardware
	for _, t := range tools {
		if p, err := exec.LookPath(t.Name); err == nil {
			t.Path, t.Found = p, true
		} else {
			r.Problems = append(r.Problems, fmt.Sprintf("%s not found: apt-get install %s", t.Name, t.Package))
		}
		r.Tools = append(r.Tools, t)
	}
	if host.QEMU != "" {
		r.QEMU = host.QEMU
		if out, err := exec.CommandContext(ctx, host.QEMU, "--version").Output(); err == nil {
			r.QEMUVersion = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	if m, err := filepath.Glob(filepath.Join(cacheDir, "images", "*", "manifest.json")); err == nil {
		r.CachedImages = len(m)
	}
	// "auto" never fails to choose: on a host with neither backend it
	// is launch.None, with the reason.
	auto, _ := launch.Choose(host, launch.Auto)
	r.Backend, r.BackendWhy = auto.Backend, auto.Why
	r.Revert, r.RevertWhy = exploration.Revert(auto.Backend)
	r.ExploreWorkers = exploration.AutoWorkerCount()
	r.HostToolIsolation = "namespaces"
	if !sandbox.Isolated() {
		r.HostToolIsolation = "none: " + sandbox.Why()
	}
	r.Lanes = checkLanes(ctx, cacheDir)
	r.ScratchDir = qemu.ScratchDir()
	var problem string
	if r.ScratchFreeMiB, problem = scratchRoom(r.ScratchDir); problem != "" {
		r.Problems = append(r.Problems, problem)
	}
	return r
}

// scratchRoom is the free space of dir, in MiB (-1 when statfs fails), and
// a problem when it cannot hold the RAM of one guest of
// vmm.DefaultMemoryMiB ("" when it can).
func scratchRoom(dir string) (int64, string) {
	free, err := scratch.Free(dir)
	if err != nil {
		return -1, fmt.Sprintf("guest RAM dir: %v (set %s to a tmpfs)", err, qemu.ScratchEnv)
	}
	if free < vmm.DefaultMemoryMiB<<20 {
		return free >> 20, fmt.Sprintf("guest RAM dir %s has %s free, less than one guest of the default %d MiB: QEMU sessions are refused (RESOURCE_EXHAUSTED); grow that tmpfs or set %s",
			dir, budget.Size(free), vmm.DefaultMemoryMiB, qemu.ScratchEnv)
	}
	return free >> 20, ""
}

// BootOptions configure a measured boot.
type BootOptions struct {
	Guest   guest.Options
	Restore vmm.RestoreMode
	// Backend is "qemu", "kvm", or "" / "auto" for what launch.Choose
	// picks on this host (falling back to QEMU if a KVM boot fails).
	Backend string
	// Pings is how many no-op round trips to time (median reported; default 200).
	Pings int
	// Restores is how many verified restores to time (median reported; default 10).
	Restores int
	// Progress receives one line per step (may be nil).
	Progress func(step string)
	Log      *zap.Logger
}

// y2038Lane is the lane the measured boot mounts: ext2 with 128-byte
// inodes, whose timestamps end at 2038.
const y2038Lane = "ext2"

// withDefaults fills in the defaults of the zero fields.
func (o BootOptions) withDefaults() BootOptions {
	if o.Pings == 0 {
		o.Pings = 200
	}
	if o.Restores == 0 {
		o.Restores = 10
	}
	if o.Restore == "" {
		o.Restore = vmm.RestoreDevices
	}
	return o
}

// step reports one step to Progress.
func (o BootOptions) step(s string) {
	if o.Progress != nil {
		o.Progress(s)
	}
}

// BootCheck boots a guest with one ext2 (-I 128) lane and measures it: the
// image build, boot to agent-ready, the agent round trip, checkpoint and
// verified restores, and the Y2038 witness. A failed verify returns the
// measurements so far with an error wrapping vmm.ErrVerify.
func BootCheck(ctx context.Context, o BootOptions) (_ *Boot, err error) {
	o = o.withDefaults()
	choice, err := launch.Choose(launch.Probe(), o.Backend)
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	b := &Boot{BootBackend: choice.Backend, RestoreMode: string(o.Restore), Y2038Set: 1 << 31, Y2038Lane: y2038Lane}
	o.step("building the guest image")
	img, err := b.buildImage(ctx, o.Guest)
	if err != nil {
		return nil, err
	}
	o.step("booting")
	g, err := b.boot(ctx, o, choice, img)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
		}
	}()
	if g.KVMFailure != nil {
		o.step(fmt.Sprintf("KVM boot failed; auto fell back to QEMU: %v", g.KVMFailure))
	}
	mb := &measuredBoot{Boot: b, g: g}
	o.step("timing the agent round trip")
	if err := mb.timeRoundTrip(ctx, o.Pings); err != nil {
		return nil, err
	}
	o.step("checkpoint and verified restores")
	if err := mb.timeRestores(ctx, o.Restores); err != nil {
		if errors.Is(err, vmm.ErrVerify) {
			return b, err
		}
		return nil, err
	}
	o.step("Y2038 witness")
	if err := mb.y2038Witness(ctx); err != nil {
		return nil, err
	}
	if err := g.Close(); err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	return b, nil
}

// buildImage builds (or finds cached) the guest image and records how long
// it took, whether it was cached and its kernel.
func (b *Boot) buildImage(ctx context.Context, o guest.Options) (*guest.Image, error) {
	t0 := time.Now()
	img, err := guest.Build(ctx, o)
	if err != nil {
		return nil, err
	}
	b.ImageMs, b.ImageCached, b.KernelVersion = ms(time.Since(t0)), img.Cached, img.KernelVersion
	return img, nil
}

// boot boots the guest with the ext2 lane mounted and records the backend
// that booted and the time to agent-ready.
func (b *Boot) boot(ctx context.Context, o BootOptions, choice launch.Choice, img *guest.Image) (*launch.Guest, error) {
	spec, err := guest.ParseLaneSpec(y2038Lane)
	if err != nil {
		return nil, err
	}
	g, err := launch.Boot(ctx, launch.Spec{MakeBase: baseimage.Make,
		Image: img, CacheDir: o.Guest.CacheDir, Lanes: []guest.LaneSpec{spec}, MemoryMiB: 128,
		Restore: o.Restore, Verify: true, Backend: choice, Log: o.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	b.BootBackend, b.BootMs = g.Backend, ms(g.StartTime)
	return g, nil
}

// measuredBoot is a booted guest and the measurements taken of it.
type measuredBoot struct {
	*Boot
	g *launch.Guest
}

// call sends one request; an agent error is an error.
func (mb *measuredBoot) call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	resp, err := mb.g.Machine.Call(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp, agent.ResponseError(resp)
}

// timeRoundTrip times pings no-op round trips (the median is recorded).
func (mb *measuredBoot) timeRoundTrip(ctx context.Context, pings int) error {
	ping := &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
	var rtts []time.Duration
	for range pings {
		t0 := time.Now()
		if _, err := mb.call(ctx, ping); err != nil {
			return fmt.Errorf("doctor: ping: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	mb.AgentRTTUs = float64(median(rtts).Nanoseconds()) / 1e3
	return nil
}

// timeRestores takes a checkpoint, then restores times writes a 4 KiB file
// and restores it (verified: Restore fails unless the RAM and disk hashes
// match the checkpoint's); the median restore is recorded.
func (mb *measuredBoot) timeRestores(ctx context.Context, restores int) error {
	m := mb.g.Machine
	t0 := time.Now()
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		return err
	}
	mb.CheckpointMs = ms(time.Since(t0))
	var times []time.Duration
	for i := range restores {
		write := &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: y2038Lane, Path: fmt.Sprintf("branch-%d", i), Flags: 0o101, Size: 4096, Fill: 0x55}}}
		if _, err := mb.call(ctx, write); err != nil {
			return fmt.Errorf("doctor: write: %w", err)
		}
		t0 := time.Now()
		if err := m.Restore(ctx, c0); err != nil {
			return err
		}
		times = append(times, time.Since(t0))
	}
	mb.RestoreVerified = true
	mb.RestoreMs = ms(median(times))
	return nil
}

// y2038Witness sets the guest clock past 2038, creates a file and records
// its mtime as the guest stats it and as the disk stores it.
func (mb *measuredBoot) y2038Witness(ctx context.Context) error {
	if _, err := mb.call(ctx, &agentv1.Request{Op: &agentv1.Request_SetClock{SetClock: &agentv1.SetClock{Time: &agentv1.Timespec{Sec: mb.Y2038Set}}}}); err != nil {
		return fmt.Errorf("doctor: set clock: %w", err)
	}
	if _, err := mb.call(ctx, &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Lane: y2038Lane, Path: "y2038", Flags: 0o1, Mode: 0o644}}}); err != nil {
		return fmt.Errorf("doctor: create: %w", err)
	}
	st, err := mb.call(ctx, &agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: y2038Lane, Path: "y2038"}}})
	if err != nil {
		return fmt.Errorf("doctor: stat: %w", err)
	}
	mb.Y2038Stored = st.GetStat().GetMtime().GetSec()
	if _, err := mb.call(ctx, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}); err != nil {
		return fmt.Errorf("doctor: sync: %w", err)
	}
	onDisk, err := diskMtime(ctx, mb.g.Lanes[0].Disk, "/y2038")
	if err != nil {
		return err
	}
	mb.Y2038OnDisk = onDisk
	return nil
}

// diskMtime reads a file's on-disk mtime (seconds) from the ext2 image
// the overlay resolves to.
func diskMtime(ctx context.Context, dev *overlay.Device, path string) (_ int64, err error) {
	tmp, err := os.MkdirTemp("", "themis-doctor-")
	if err != nil {
		return 0, fmt.Errorf("doctor: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil {
			err = errors.Join(err, fmt.Errorf("doctor: %w", rerr))
		}
	}()
	img := filepath.Join(tmp, "ext2.img")
	if err := dev.Materialize(img); err != nil {
		return 0, err
	}
	times, err := guest.ExtInodeTimes(ctx, img, path)
	if err != nil {
		return 0, err
	}
	return times.Mtime, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
