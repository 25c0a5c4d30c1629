//go:build linux

// Command themis-nested-init is /init of the emulated AMD-V host
// (internal/nested): it loads the KVM modules, mounts the job disk
// (/dev/vda, ext4), runs the plan's steps chrooted into it with the
// results in /out, and powers off. It is built by internal/nested into an
// initramfs with the Debian cloud kernel; it is not meant for a real host.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/themisfs/themis/internal/nested"
	"github.com/themisfs/themis/internal/pid1"
	"github.com/themisfs/themis/vmm/kvm"
)

const (
	jobDevice = "/dev/vda"
	jobRoot   = "/job"
	diskWait  = 30 * time.Second
)

func main() {
	cfg := zap.NewDevelopmentConfig()
	cfg.DisableStacktrace = true
	log, err := cfg.Build()
	if err != nil {
		log = zap.NewNop()
	}
	log = log.Named("nested-init")
	defer func() {
		if p := recover(); p != nil {
			log.Error("init panicked", zap.Any("panic", p))
		}
		pid1.PowerOff(log)
	}()
	pid1.MountEarly(log)
	pid1.EnsureConsole(log)
	pid1.LoadModules(log, "/modules", "order")
	if err := run(log); err != nil {
		log.Error("nested job", zap.Error(err))
	}
}

func run(log *zap.Logger) error {
	if err := mountJob(log); err != nil {
		return err
	}
	defer unmountJob(log)
	b, err := os.ReadFile(filepath.Join(jobRoot, nested.PlanFile))
	if err != nil {
		return fmt.Errorf("read plan: %w", err)
	}
	plan, err := nested.ParsePlan(b)
	if err != nil {
		return err
	}
	res := nested.Result{}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		res.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f, ok := strings.CutPrefix(l, "flags"); ok {
				res.Flags = strings.TrimLeft(f, "\t :")
				break
			}
		}
	}
	ok, why := kvm.HardwareVirtualization()
	res.KVM = fmt.Sprintf("%v: %s", ok, why)
	log.Info("emulated host ready", zap.String("kernel", res.Kernel), zap.String("kvm", res.KVM), zap.Int("steps", len(plan.Steps)))
	for _, s := range plan.Steps {
		r := runStep(log, s)
		res.Steps = append(res.Steps, r)
		if err := writeResult(&res); err != nil { // after every step: a later hang keeps the earlier results
			return err
		}
	}
	return nil
}

// mountJob waits for the job disk, mounts it and gives it /dev, /proc,
// /sys and a fresh /tmp for the chrooted steps.
func mountJob(log *zap.Logger) error {
	deadline := time.Now().Add(diskWait)
	for {
		if _, err := os.Stat(jobDevice); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s after %v (virtio_blk loaded?)", jobDevice, diskWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.MkdirAll(jobRoot, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(jobDevice, jobRoot, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s: %w", jobDevice, err)
	}
	for _, d := range []string{"dev", "proc", "sys"} {
		if err := bind("/"+d, filepath.Join(jobRoot, d)); err != nil {
			return err
		}
	}
	tmp := filepath.Join(jobRoot, "tmp")
	if err := os.MkdirAll(tmp, 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", tmp, err)
	}
	log.Info("job disk mounted", zap.String("at", jobRoot))
	return nil
}

func bind(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	return nil
}

// unmountJob flushes the job disk: the host reads /out from the image once
// the machine is off.
func unmountJob(log *zap.Logger) {
	unix.Sync()
	for _, d := range []string{"tmp", "sys", "proc", "dev"} {
		if err := unix.Unmount(filepath.Join(jobRoot, d), unix.MNT_DETACH); err != nil {
			log.Warn("unmount", zap.String("dir", d), zap.Error(err))
		}
	}
	if err := unix.Unmount(jobRoot, 0); err != nil {
		log.Warn("unmount job disk; syncing instead", zap.Error(err))
		unix.Sync()
	}
}

// runStep runs one step chrooted into the job disk under its timeout.
func runStep(log *zap.Logger, s nested.Step) nested.StepResult {
	r := nested.StepResult{Name: s.Name, ExitCode: -1}
	timeout := time.Duration(s.Timeout)
	if timeout == 0 {
		timeout = nested.DefaultStepTimeout
	}
	open := func(ext string) (*os.File, error) {
		return os.Create(filepath.Join(jobRoot, nested.OutDir, s.Name+ext))
	}
	stdout, err := open(".out")
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer stdout.Close()
	stderr, err := open(".err")
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer stderr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Argv[0], s.Argv[1:]...)
	cmd.Env = s.Env
	cmd.Dir = s.Dir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if s.Echo {
		cmd.Stdout = io.MultiWriter(stdout, os.Stderr)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: jobRoot, Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	log.Info("step started", zap.String("step", s.Name), zap.String("argv", strings.Join(s.Argv, " ")), zap.Duration("timeout", timeout))
	mark(log, nested.StartLine(s.Name))
	t0 := time.Now()
	err = cmd.Run()
	r.Seconds = time.Since(t0).Seconds()
	mark(log, nested.EndLine(s.Name))
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Error = fmt.Sprintf("killed after the step's timeout %v", timeout)
	case errors.As(err, &ee):
		r.ExitCode = ee.ExitCode()
	case err != nil:
		r.Error = err.Error()
	default:
		r.ExitCode = 0
	}
	if err := syncOutputs(stdout, stderr); err != nil && r.Error == "" {
		r.Error = err.Error()
	}
	log.Info("step ended", zap.String("step", s.Name), zap.Int("exit_code", r.ExitCode), zap.String("error", r.Error), zap.Float64("seconds", r.Seconds))
	return r
}

// syncOutputs writes a step's output files to the job disk before its
// result is recorded: the emulated host can die in a later step of the
// same boot, and an output left in its page cache then reads back as NUL
// bytes after the journal replay while result.json (synced) says the step
// passed (seen 2026-12-03: a passed Nested judged "did not run").
func syncOutputs(files ...*os.File) error {
	var errs []error
	for _, f := range files {
		if err := f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", f.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// mark prints a step mark on the console (fd 2): the host watching the
// console tells from them which step its lines belong to.
func mark(log *zap.Logger, line string) {
	if _, err := io.WriteString(os.Stderr, line); err != nil {
		log.Warn("step mark", zap.Error(err))
	}
}

func writeResult(res *nested.Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(jobRoot, nested.ResultFile)
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
