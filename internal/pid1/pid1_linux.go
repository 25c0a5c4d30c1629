//go:build linux

package pid1

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// MountEarly mounts the pseudo filesystems init needs. Failures are logged;
// an already mounted one (EBUSY) is fine.
func MountEarly(log *zap.Logger) {
	mounts := []struct {
		source, target, fstype string
		flags                  uintptr
		data                   string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			log.Error("mkdir", zap.String("path", m.target), zap.Error(err))
			continue
		}
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			log.Error("mount", zap.String("target", m.target), zap.String("fstype", m.fstype), zap.Error(err))
		}
	}
}

// EnsureConsole gives init stdin/stdout/stderr on /dev/console when the
// kernel found no console to open before /dev existed.
func EnsureConsole(log *zap.Logger) {
	if _, err := unix.FcntlInt(2, unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		return
	}
	fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		log.Error("open /dev/console", zap.Error(err)) // goes nowhere, but try
		return
	}
	for target := 0; target <= 2; target++ {
		if fd == target {
			continue
		}
		if err := unix.Dup3(fd, target, 0); err != nil {
			log.Error("dup console", zap.Int("fd", target), zap.Error(err))
		}
	}
	if fd > 2 {
		if err := unix.Close(fd); err != nil {
			log.Warn("close console", zap.Error(err))
		}
	}
}

// LoadModules loads dir/<name> for each name in dir/<list> ("order" at
// boot, "lazy" for the filesystem modules deferred to their first mount),
// in order, and returns how many it loaded. EEXIST (already loaded or built
// in) is fine; other failures are logged.
func LoadModules(log *zap.Logger, dir, list string) int {
	f, err := os.Open(filepath.Join(dir, list))
	if errors.Is(err, os.ErrNotExist) {
		log.Info("no modules to load", zap.String("dir", dir), zap.String("list", list))
		return 0
	}
	if err != nil {
		log.Error("open module list", zap.String("list", list), zap.Error(err))
		return 0
	}
	defer func() {
		if err := f.Close(); err != nil {
			log.Warn("close module order", zap.Error(err))
		}
	}()
	loaded, failed := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		switch err := loadModule(filepath.Join(dir, name)); {
		case err == nil:
			loaded++
		case errors.Is(err, unix.EEXIST):
		default:
			failed++
			log.Error("load module", zap.String("module", name), zap.Error(err))
		}
	}
	if err := sc.Err(); err != nil {
		log.Error("read module order", zap.Error(err))
	}
	log.Info("modules loaded", zap.String("list", list), zap.Int("loaded", loaded), zap.Int("failed", failed))
	return loaded
}

func loadModule(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	flags := 0
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(path, ext) {
			flags |= unix.MODULE_INIT_COMPRESSED_FILE
		}
	}
	// The parameter string must be a valid pointer to "", never NULL.
	err = unix.FinitModule(fd, "", flags)
	if cerr := unix.Close(fd); cerr != nil && err == nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return err
}

// PowerOff ends the machine; PID 1 must never exit.
func PowerOff(log *zap.Logger) {
	log.Error("powering off")
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	log.Error("power off failed; halting here", zap.Error(err))
	select {}
}
