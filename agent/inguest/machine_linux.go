package inguest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Exec limits.
const (
	execOutputMax      = 1 << 20 // bytes kept of stdout and of stderr each
	execDefaultTimeout = 10 * time.Second
	execMaxTimeout     = 10 * time.Minute
)

// sysBlock is where block devices list their attributes (serial).
const sysBlock = "/sys/block"

func (s *Server) ping(resp *agentv1.Response) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		fail(resp, "ping", "", err)
		return
	}
	s.mu.Lock()
	var lanes []string
	for name, st := range s.lanes {
		if st.mounted {
			lanes = append(lanes, name)
		}
	}
	s.mu.Unlock()
	slices.Sort(lanes)
	resp.Result = &agentv1.Response_Ping{Ping: &agentv1.PingResult{
		Version:     s.Version,
		MonotonicNs: ts.Nano(),
		Lanes:       lanes,
	}}
}

// mount implements Mount.
func (s *Server) mount(m *agentv1.Mount) error {
	lane := m.GetLane()
	if err := checkLane(lane); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.lanes[lane]
	cfg := m
	if m.GetDevice() == "" {
		if st == nil || st.cfg == nil {
			return errorf(unix.EINVAL, "lane %q was never mounted: device and fstype needed", lane)
		}
		cfg = st.cfg
	} else if m.GetFstype() == "" {
		return errorf(unix.EINVAL, "no fstype for lane %q", lane)
	}
	if st != nil && st.mounted {
		return errorf(unix.EBUSY, "lane %q is already mounted", lane)
	}
	if err := checkMountOptions(cfg); err != nil {
		return err
	}
	target := s.lanePath(lane)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", target, err)
	}
	if cfg.GetFstype() == overlayFstype {
		if err := s.mountOverlay(lane, target, cfg); err != nil {
			return err
		}
	} else if err := s.mountDevice(target, cfg); err != nil {
		return err
	}
	if s.lanes == nil {
		s.lanes = make(map[string]*laneState)
	}
	s.lanes[lane] = &laneState{cfg: proto.CloneOf(cfg), mounted: true}
	return nil
}

// mountDevice mounts a plain lane: one device at target. When the kernel
// does not know the filesystem (ENODEV) and LoadFS is set, it loads the
// filesystem's modules and tries once more.
func (s *Server) mountDevice(target string, cfg *agentv1.Mount) error {
	dev, err := s.device(cfg.GetDevice())
	if err != nil {
		return err
	}
	err = mountDeviceOnce(dev, target, cfg)
	if !errors.Is(err, unix.ENODEV) || s.LoadFS == nil {
		return err
	}
	if lerr := s.LoadFS(cfg.GetFstype()); lerr != nil {
		return fmt.Errorf("%w (loading filesystem modules: %v)", err, lerr)
	}
	return mountDeviceOnce(dev, target, cfg)
}

func mountDeviceOnce(dev, target string, cfg *agentv1.Mount) error {
	flags, data := mountOptions(cfg.GetOptions())
	if cfg.GetReadOnly() {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(dev, target, cfg.GetFstype(), flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s, %q): %w", dev, target, cfg.GetFstype(), data, err)
	}
	return nil
}

// umount implements Umount.
func (s *Server) umount(lane string) error {
	if err := checkLane(lane); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := unix.Unmount(s.lanePath(lane), 0); err != nil {
		return err
	}
	var layersErr error // the lane is unmounted even if a layer stays mounted
	if st := s.lanes[lane]; st != nil && st.mounted && st.cfg.GetFstype() == overlayFstype {
		layersErr = s.umountLayers(lane)
	}
	if s.lanes == nil {
		s.lanes = make(map[string]*laneState)
	}
	if st := s.lanes[lane]; st != nil {
		st.mounted = false
	} else {
		s.lanes[lane] = &laneState{}
	}
	return layersErr
}

// device is resolveDevice against the guest's sysBlock, remembered: a
// machine's disks do not change while it runs (no hotplug), and reading a
// virtio disk's serial is a request to the device (VIRTIO_BLK_T_GET_ID),
// about a millisecond each under TCG, which every remount paid for every
// disk. A failed resolution is not remembered. The caller holds s.mu.
func (s *Server) device(dev string) (string, error) {
	if path, ok := s.devices[dev]; ok {
		return path, nil
	}
	sys := s.sysBlock
	if sys == "" {
		sys = sysBlock
	}
	path, err := resolveDevice(dev, sys)
	if err != nil {
		return "", err
	}
	if s.devices == nil {
		s.devices = make(map[string]string)
	}
	s.devices[dev] = path
	return path, nil
}

// resolveDevice maps "serial:<s>" to /dev/<name> of the block device whose
// sysBlock/<name>/serial is s (surrounding whitespace ignored); other
// devices must be absolute paths and are returned unchanged.
func resolveDevice(dev, sysBlock string) (string, error) {
	serial, ok := strings.CutPrefix(dev, "serial:")
	if !ok {
		if !filepath.IsAbs(dev) {
			return "", errorf(unix.EINVAL, "device %q is neither absolute nor serial:<s>", dev)
		}
		return dev, nil
	}
	if serial == "" {
		return "", errorf(unix.EINVAL, "empty disk serial")
	}
	ents, err := os.ReadDir(sysBlock)
	if err != nil {
		return "", fmt.Errorf("list %s: %w", sysBlock, err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(sysBlock, e.Name(), "serial"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read serial of %s: %w", e.Name(), err)
		}
		if string(bytes.TrimSpace(b)) == serial {
			return "/dev/" + e.Name(), nil
		}
	}
	return "", errorf(unix.ENOENT, "no disk with serial %q", serial)
}

// mountFlags are the generic options mount(8) turns into flags; the rest of
// an options string goes to the filesystem as data.
var mountFlags = map[string]struct {
	set, clear uintptr
}{
	"ro":          {unix.MS_RDONLY, 0},
	"rw":          {0, unix.MS_RDONLY},
	"sync":        {unix.MS_SYNCHRONOUS, 0},
	"async":       {0, unix.MS_SYNCHRONOUS},
	"dirsync":     {unix.MS_DIRSYNC, 0},
	"noatime":     {unix.MS_NOATIME, 0},
	"atime":       {0, unix.MS_NOATIME},
	"nodiratime":  {unix.MS_NODIRATIME, 0},
	"relatime":    {unix.MS_RELATIME, 0},
	"norelatime":  {0, unix.MS_RELATIME},
	"strictatime": {unix.MS_STRICTATIME, 0},
	"lazytime":    {unix.MS_LAZYTIME, 0},
	"nolazytime":  {0, unix.MS_LAZYTIME},
	"nodev":       {unix.MS_NODEV, 0},
	"noexec":      {unix.MS_NOEXEC, 0},
	"nosuid":      {unix.MS_NOSUID, 0},
}

// mountOptions splits a comma-separated option string into flags and data.
func mountOptions(opts string) (flags uintptr, data string) {
	var rest []string
	for _, o := range strings.Split(opts, ",") {
		if o == "" {
			continue
		}
		if f, ok := mountFlags[o]; ok {
			flags = flags&^f.clear | f.set
			continue
		}
		rest = append(rest, o)
	}
	return flags, strings.Join(rest, ",")
}

// dropCaches syncs and writes level to /proc/sys/vm/drop_caches.
func dropCaches(level uint32) error {
	if level < 1 || level > 3 {
		return errorf(unix.EINVAL, "drop_caches level %d not in 1..3", level)
	}
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte{byte('0' + level), '\n'}, 0); err != nil {
		return err
	}
	return nil
}

// setWriteback writes vm.dirty_writeback_centisecs: 500 (the kernel's
// default) when periodic, else 0 (no periodic writeback).
func setWriteback(periodic bool) error {
	v := "0\n"
	if periodic {
		v = "500\n"
	}
	return os.WriteFile("/proc/sys/vm/dirty_writeback_centisecs", []byte(v), 0)
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	keep := min(len(p), c.max-c.buf.Len())
	c.buf.Write(p[:keep])
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}

// exec implements Exec. A run that ends in any way returns a result; one that
// timed out also returns ETIMEDOUT.
func (s *Server) exec(e *agentv1.Exec) (*agentv1.ExecResult, error) {
	bin, dir, err := s.execPath(e)
	if err != nil {
		return nil, err
	}
	timeout := execDefaultTimeout
	if ms := e.GetTimeoutMs(); ms > 0 {
		timeout = min(time.Duration(ms)*time.Millisecond, execMaxTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, e.GetArgs()...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	stdout, stderr := &capped{max: execOutputMax}, &capped{max: execOutputMax}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Children that keep the pipes open must not hold the agent.
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if cmd.ProcessState == nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	res := &agentv1.ExecResult{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes()}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		res.ExitCode = -1
		res.Signal = int32(ws.Signal())
	default:
		res.ExitCode = int32(cmd.ProcessState.ExitCode())
	}
	if ctx.Err() != nil {
		return res, errorf(unix.ETIMEDOUT, "timed out after %v", timeout)
	}
	return res, nil
}

// execPath returns the program and working directory of an Exec.
func (s *Server) execPath(e *agentv1.Exec) (bin, dir string, err error) {
	p := e.GetPath()
	if e.GetLane() == "" {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
			return "", "", errorf(unix.EINVAL, "exec path %q must be absolute and clean without a lane", p)
		}
		return p, "/", nil
	}
	if err := checkPath(p); err != nil {
		return "", "", err
	}
	if p == "" {
		return "", "", errorf(unix.EINVAL, "empty exec path")
	}
	fd, err := s.openLane(e.GetLane())
	if err != nil {
		return "", "", err
	}
	s.closeFd(fd, "lane "+e.GetLane())
	dir = s.lanePath(e.GetLane())
	return filepath.Join(dir, p), dir, nil
}
