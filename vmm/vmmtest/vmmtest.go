package vmmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap/zaptest"
)

// Factory starts a machine of the backend under test.
type Factory func(ctx context.Context, cfg vmm.Config) (vmm.Machine, error)

// Env holds what the suite needs from the host: a guest image and base images.
type Env struct {
	Image    *guest.Image
	CacheDir string
}

// Setup builds (or finds cached) the guest image and checks for QEMU.
// Without them it skips, or fails under CI=true.
func Setup(t testing.TB) *Env {
	t.Helper()
	env := setupImage(t)
	if launch.Probe().QEMU == "" {
		unavailable(t, errors.New("qemu-system-x86_64 not installed (Debian qemu-system-x86)"))
	}
	return env
}

// SetupKVM checks that /dev/kvm is hardware virtualization (a stock Linux
// kernel cannot boot on PVM hosts) and builds or finds the guest image.
// Without hardware virtualization it skips with the reason, and fails
// under THEMIS_REQUIRE_KVM=1.
func SetupKVM(t testing.TB) *Env {
	t.Helper()
	RequireKVM(t)
	return setupImage(t)
}

// RequireKVM skips (or fails under THEMIS_REQUIRE_KVM=1) unless this host's
// /dev/kvm is hardware virtualization (vmx/svm): unless launch.Choose
// grants an asked-for kvm.
func RequireKVM(t testing.TB) {
	t.Helper()
	_, err := launch.Choose(launch.Probe(), launch.KVM)
	if err == nil {
		return
	}
	if os.Getenv("THEMIS_REQUIRE_KVM") == "1" {
		t.Fatalf("vmmtest: THEMIS_REQUIRE_KVM=1 but %v", err)
	}
	t.Skipf("vmmtest: Linux on the KVM backend: %v (THEMIS_REQUIRE_KVM=1 makes this a failure)", err)
}

// SetupImage builds or finds the guest image only (no backend check).
// Without one it skips, or fails under CI=true.
func SetupImage(t testing.TB) *Env {
	t.Helper()
	return setupImage(t)
}

func setupImage(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("vmmtest: real-kernel test skipped in -short mode")
	}
	cache, err := guest.DefaultCacheDir()
	if err != nil {
		unavailable(t, fmt.Errorf("cache dir: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img, err := guest.Build(ctx, guest.Options{CacheDir: cache, Log: zaptest.NewLogger(t)})
	if err != nil {
		unavailable(t, fmt.Errorf("guest image: %w", err))
	}
	return &Env{Image: img, CacheDir: cache}
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" || os.Getenv("THEMIS_REQUIRE_QEMU") == "1" {
		t.Fatalf("vmmtest: required environment missing: %v", err)
	}
	t.Skipf("vmmtest: skipped, environment missing: %v", err)
}

// Lane returns an overlay over a fresh base image for spec (e.g. "ext2"),
// closed at the test's end (launch.OpenDisk).
func (e *Env) Lane(t testing.TB, spec string) *overlay.Device {
	t.Helper()
	ls, err := guest.ParseLaneSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := launch.OpenDisk(context.Background(), baseimage.Make, e.CacheDir, ls)
	if err != nil {
		t.Fatalf("lane %s: %v", spec, err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Errorf("close overlay: %v", err)
		}
	})
	return dev
}

// Config returns a machine config for the given lanes (serials
// launch.LaneSerial: lane0, lane1, ...), for tests that start a backend
// themselves; Boot assembles and mounts a whole guest.
func (e *Env) Config(t testing.TB, devs ...*overlay.Device) vmm.Config {
	cfg := vmm.Config{
		Kernel:    e.Image.Kernel,
		Initramfs: e.Image.Initramfs,
		MemoryMiB: 128,
		Verify:    true,
		Log:       zaptest.NewLogger(t),
	}
	for i, d := range devs {
		cfg.Disks = append(cfg.Disks, vmm.Disk{Serial: launch.LaneSerial(i), Device: d})
	}
	return cfg
}

// Do runs one request and fails the test on a transport error or a non-zero errno.
func Do(t testing.TB, m vmm.Machine, req *agentv1.Request) *agentv1.Response {
	t.Helper()
	return DoWithin(t, m, req, 30*time.Second)
}

// DoWithin is Do with its own deadline.
func DoWithin(t testing.TB, m vmm.Machine, req *agentv1.Request, d time.Duration) *agentv1.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := m.Call(ctx, req)
	if err != nil {
		t.Fatalf("call %v: %v", req, err)
	}
	if err := agent.ResponseError(resp); err != nil {
		t.Fatalf("call %v: %v", req, err)
	}
	return resp
}

// Request constructors keep the tests short.
func mount(lane, serial, fs string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane, Device: "serial:" + serial, Fstype: fs}}}
}
func remount(lane string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane}}}
}
func umount(lane string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: lane}}}
}
func create(lane, path string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Lane: lane, Path: path, Flags: 0o1 /* O_WRONLY */, Mode: 0o644}}}
}
func write(lane, path string, data []byte) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: lane, Path: path, Flags: 0o1 | 0o100 | 0o1000 /* O_WRONLY|O_CREAT|O_TRUNC */, Data: data}}}
}
func writeFill(lane, path string, off, size int64, fill byte) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: lane, Path: path, Flags: 0o1 | 0o100, Offset: off, Size: size, Fill: uint32(fill)}}}
}
func unlink(lane, path string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Unlink{Unlink: &agentv1.Unlink{Lane: lane, Path: path}}}
}
func mkdir(lane, path string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: lane, Path: path, Mode: 0o755}}}
}
func chmod(lane, path string, mode uint32) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Chmod{Chmod: &agentv1.Chmod{Lane: lane, Path: path, Mode: mode}}}
}
func stat(lane, path string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: lane, Path: path}}}
}
func syncAll() *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}
}
func setClock(sec int64) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_SetClock{SetClock: &agentv1.SetClock{Time: &agentv1.Timespec{Sec: sec}}}}
}
func execReq(lane, path string, timeout time.Duration) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Exec{Exec: &agentv1.Exec{Lane: lane, Path: path, TimeoutMs: uint32(timeout.Milliseconds())}}}
}
func fingerprint(lane string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: agentv1.TimeMode_TIME_MODE_ALL}}}
}

func fingerprintLeaves(lane string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: agentv1.TimeMode_TIME_MODE_ALL, Leaves: true}}}
}

// Root returns the lane's fingerprint root with all timestamps included.
func Root(t testing.TB, m vmm.Machine, lane string) []byte {
	t.Helper()
	return Do(t, m, fingerprint(lane)).GetFingerprint().GetRoot()
}

// ExtInodeMtime reads a file's on-disk mtime seconds from an ext2/3/4 image
// on the host (debugfs over the overlay-resolved image).
func ExtInodeMtime(t testing.TB, dev *overlay.Device, path string) int64 {
	t.Helper()
	img := filepath.Join(t.TempDir(), "resolved.img")
	if err := dev.Materialize(img); err != nil {
		t.Fatal(err)
	}
	times, err := guest.ExtInodeTimes(context.Background(), img, path)
	if err != nil {
		t.Fatal(err)
	}
	return times.Mtime
}

// Fsck runs e2fsck -fn on the resolved image and fails the test unless it is clean.
func Fsck(t testing.TB, dev *overlay.Device) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fsck.img")
	if err := dev.Materialize(img); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn on the resolved image: %v\n%s", err, out)
	}
}

// Leaks snapshots the process's fds and children; call the returned function
// after Close to check nothing was left behind.
func Leaks(t testing.TB) func() {
	t.Helper()
	fds, kids := countFDs(t), children(t)
	return func() {
		t.Helper()
		// Children are reaped asynchronously by exec; give them a moment.
		deadline := time.Now().Add(5 * time.Second)
		for {
			f, k := countFDs(t), children(t)
			if f <= fds && len(k) <= len(kids) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leak: fds %d -> %d, child processes %v -> %v", fds, f, kids, k)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func countFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func children(t testing.TB) []string {
	self := strconv.Itoa(os.Getpid())
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == self {
			kids = append(kids, e.Name())
		}
	}
	return kids
}

// SpinRequest mounts the first disk as lane "ext2", installs a program that
// never exits, and returns the request that runs it (with a one-hour timeout).
func SpinRequest(t testing.TB, m vmm.Machine) *agentv1.Request {
	t.Helper()
	Do(t, m, mount("ext2", m.Disks()[0].Serial, "ext2"))
	return installSpin(t, m, "ext2")
}

// installSpin installs a program that never exits on a mounted lane and
// returns the request that runs it (with a one-hour timeout).
func installSpin(t testing.TB, m vmm.Machine, lane string) *agentv1.Request {
	t.Helper()
	Do(t, m, write(lane, "spin", TinyELF(SpinCode())))
	Do(t, m, chmod(lane, "spin", 0o755))
	return execReq(lane, "spin", time.Hour)
}
