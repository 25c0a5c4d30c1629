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
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm"
	"github.com/themisfs/themis/vmm/qemu"
	"go.uber.org/zap"
)

// Tool is one host program Themis uses.
type Tool struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`
	Package string `json:"package"`
	Found   bool   `json:"found"`
}

// Report is what doctor found. JSON field names are a stable interface.
type Report struct {
	KVMDevice    bool   `json:"kvm_device"`
	KVMHardware  bool   `json:"kvm_hardware_virtualization"`
	KVMKind      string `json:"kvm_kind"` // "hardware", "pvm", "absent"
	KVMWhy       string `json:"kvm_why"`
	QEMU         string `json:"qemu,omitempty"`
	QEMUVersion  string `json:"qemu_version,omitempty"`
	Tools        []Tool `json:"tools"`
	CacheDir     string `json:"cache_dir"`
	CachedImages int    `json:"cached_images"`
	Backend      string `json:"backend"`
	BackendWhy   string `json:"backend_why"`
	// Boot is set by --boot; its fields appear at the top level of the JSON.
	*Boot
	BootError string   `json:"boot_error,omitempty"`
	Problems  []string `json:"problems,omitempty"`
}

// Boot holds the measurements of a booted guest.
type Boot struct {
	BootBackend     string  `json:"boot_backend"`
	KernelVersion   string  `json:"kernel_version"`
	ImageCached     bool    `json:"image_cached"`
	ImageMs         float64 `json:"image_ms"`
	BootMs          float64 `json:"boot_ms"`
	AgentRTTUs      float64 `json:"agent_rtt_us"`
	CheckpointMs    float64 `json:"checkpoint_ms"`
	RestoreMs       float64 `json:"restore_ms"`
	RestoreMode     string  `json:"restore_mode"`
	RestoreVerified bool    `json:"restore_verified"`
	Y2038Set        int64   `json:"y2038_set"`
	Y2038Stored     int64   `json:"y2038_stored"`
	Y2038OnDisk     int64   `json:"y2038_on_disk"`
	Y2038Lane       string  `json:"y2038_lane"`
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
	{Name: "dpkg-deb", Package: "dpkg"},
	{Name: "apt-get", Package: "apt"},
}

// Check inspects the host without starting anything.
func Check(ctx context.Context, cacheDir string) *Report {
	r := &Report{CacheDir: cacheDir}
	r.KVMKind, r.KVMWhy = kvmKind()
	r.KVMDevice = r.KVMKind != "absent"
	r.KVMHardware = r.KVMKind == "hardware"
	for _, t := range tools {
		if p, err := exec.LookPath(t.Name); err == nil {
			t.Path, t.Found = p, true
		} else {
			r.Problems = append(r.Problems, fmt.Sprintf("%s not found: apt-get install %s", t.Name, t.Package))
		}
		r.Tools = append(r.Tools, t)
	}
	if p, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		r.QEMU = p
		if out, err := exec.CommandContext(ctx, p, "--version").Output(); err == nil {
			r.QEMUVersion = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	if m, err := filepath.Glob(filepath.Join(cacheDir, "images", "*", "manifest.json")); err == nil {
		r.CachedImages = len(m)
	}
	r.Backend, r.BackendWhy = PickBackend(r.KVMKind, r.QEMU != "")
	return r
}

// kvmKind tells whether /dev/kvm is hardware virtualization.
func kvmKind() (kind, why string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "absent", fmt.Sprintf("/dev/kvm: %v", err)
	}
	if err := f.Close(); err != nil {
		return "absent", fmt.Sprintf("/dev/kvm: %v", err)
	}
	if hw, why := kvm.HardwareVirtualization(); hw {
		return "hardware", "/dev/kvm opens and the " + why
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return "pvm", "/dev/kvm is kvm_pvm (pagetable-based, no vmx/svm): a stock Linux kernel cannot boot through it; synthetic low-address guests can (vmm/kvm)"
	}
	return "pvm", "/dev/kvm opens but the CPU shows neither vmx nor svm: not hardware virtualization"
}

// PickBackend is the "auto" rule: the Go KVM backend where /dev/kvm is
// hardware virtualization (it needs no QEMU); otherwise QEMU with TCG.
func PickBackend(kvmKind string, haveQEMU bool) (backend, why string) {
	switch {
	case kvmKind == "hardware":
		return "kvm", "/dev/kvm is hardware virtualization: the Go KVM backend (vmm/kvm), restores in time proportional to the pages dirtied (sessions fall back to QEMU if its boot fails)"
	case kvmKind == "pvm" && haveQEMU:
		return "qemu", "/dev/kvm is not hardware virtualization, so Linux cannot boot on it: QEMU with TCG"
	case haveQEMU:
		return "qemu", "no /dev/kvm: QEMU with TCG"
	default:
		return "none", "no usable backend: install qemu-system-x86 (apt-get install qemu-system-x86 qemu-utils)"
	}
}

// BootOptions configure a measured boot.
type BootOptions struct {
	Guest   guest.Options
	Restore vmm.RestoreMode
	// Backend is "qemu", "kvm", or "" / "auto" for what PickBackend picks
	// on this host.
	Backend string
	// Pings is how many no-op round trips to time (median reported; default 200).
	Pings int
	// Restores is how many verified restores to time (median reported; default 10).
	Restores int
	// Progress receives one line per step (may be nil).
	Progress func(step string)
	Log      *zap.Logger
}

// BootCheck boots a guest with one ext2 (-I 128) lane and measures it.
func BootCheck(ctx context.Context, o BootOptions) (*Boot, error) {
	if o.Pings == 0 {
		o.Pings = 200
	}
	if o.Restores == 0 {
		o.Restores = 10
	}
	if o.Restore == "" {
		o.Restore = vmm.RestoreDevices
	}
	step := func(s string) {
		if o.Progress != nil {
			o.Progress(s)
		}
	}
	backend := o.Backend
	switch backend {
	case "", "auto":
		kind, _ := kvmKind()
		backend, _ = PickBackend(kind, true)
	case "qemu", "kvm":
	default:
		return nil, fmt.Errorf("doctor: backend %q: want auto, qemu or kvm", o.Backend)
	}
	b := &Boot{BootBackend: backend, RestoreMode: string(o.Restore), Y2038Set: 1 << 31, Y2038Lane: "ext2"}
	step("building the guest image")
	t0 := time.Now()
	img, err := guest.Build(ctx, o.Guest)
	if err != nil {
		return nil, err
	}
	b.ImageMs, b.ImageCached, b.KernelVersion = ms(time.Since(t0)), img.Cached, img.KernelVersion
	spec, err := guest.ParseLaneSpec("ext2")
	if err != nil {
		return nil, err
	}
	cache := o.Guest.CacheDir
	if cache == "" {
		if cache, err = guest.DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	base, err := guest.MakeBase(ctx, cache, spec)
	if err != nil {
		return nil, err
	}
	dev, err := overlay.Open(base)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	step("booting")
	t0 = time.Now()
	cfg := vmm.Config{
		Kernel: img.Kernel, Initramfs: img.Initramfs, MemoryMiB: 128,
		Disks:   []vmm.Disk{{Serial: "lane0", Device: dev}},
		Restore: o.Restore, Verify: true, Log: o.Log,
	}
	var m vmm.Machine
	if backend == "kvm" {
		m, err = kvm.Start(ctx, cfg)
	} else {
		m, err = qemu.Start(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	defer m.Close()
	b.BootMs = ms(time.Since(t0))
	call := func(req *agentv1.Request) (*agentv1.Response, error) {
		resp, err := m.Call(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp, agent.ResponseError(resp)
	}
	if _, err := call(&agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: "ext2", Device: "serial:lane0", Fstype: "ext2"}}}); err != nil {
		return nil, fmt.Errorf("doctor: mount lane: %w", err)
	}
	step("timing the agent round trip")
	ping := &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
	var rtts []time.Duration
	for range o.Pings {
		t0 := time.Now()
		if _, err := call(ping); err != nil {
			return nil, fmt.Errorf("doctor: ping: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	b.AgentRTTUs = float64(median(rtts).Nanoseconds()) / 1e3
	step("checkpoint and verified restores")
	t0 = time.Now()
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	b.CheckpointMs = ms(time.Since(t0))
	var restores []time.Duration
	for i := range o.Restores {
		write := &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: "ext2", Path: fmt.Sprintf("branch-%d", i), Flags: 0o101, Size: 4096, Fill: 0x55}}}
		if _, err := call(write); err != nil {
			return nil, fmt.Errorf("doctor: write: %w", err)
		}
		t0 := time.Now()
		if err := m.Restore(ctx, c0); err != nil {
			if errors.Is(err, vmm.ErrVerify) {
				return b, err
			}
			return nil, err
		}
		restores = append(restores, time.Since(t0))
	}
	// Restore with Verify on fails unless RAM and disk hashes matched.
	b.RestoreVerified = true
	b.RestoreMs = ms(median(restores))
	step("Y2038 witness")
	if _, err := call(&agentv1.Request{Op: &agentv1.Request_SetClock{SetClock: &agentv1.SetClock{Time: &agentv1.Timespec{Sec: b.Y2038Set}}}}); err != nil {
		return nil, fmt.Errorf("doctor: set clock: %w", err)
	}
	if _, err := call(&agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Lane: "ext2", Path: "y2038", Flags: 0o1, Mode: 0o644}}}); err != nil {
		return nil, fmt.Errorf("doctor: create: %w", err)
	}
	st, err := call(&agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: "ext2", Path: "y2038"}}})
	if err != nil {
		return nil, fmt.Errorf("doctor: stat: %w", err)
	}
	b.Y2038Stored = st.GetStat().GetMtime().GetSec()
	if _, err := call(&agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}); err != nil {
		return nil, fmt.Errorf("doctor: sync: %w", err)
	}
	tmp, err := os.MkdirTemp("", "themis-doctor-")
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	defer os.RemoveAll(tmp)
	img2 := filepath.Join(tmp, "ext2.img")
	if err := dev.Materialize(img2); err != nil {
		return nil, err
	}
	times, err := guest.ExtInodeTimes(ctx, img2, "/y2038")
	if err != nil {
		return nil, err
	}
	b.Y2038OnDisk = times.Mtime
	if err := m.Close(); err != nil {
		return nil, err
	}
	return b, nil
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
