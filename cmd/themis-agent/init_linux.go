package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/themisfs/themis/agent"
)

// Guest layout.
const (
	modulesDir = "/modules"
	lanesDir   = "/lanes"
	layersDir  = "/layers" // overlay lanes' layer mounts
)

// channelWait is how long init waits for the channel device to appear
// (virtio_console creates /dev/hvc* after its module loads).
const channelWait = 10 * time.Second

// runInit is PID 1: set up the guest, then serve the agent channel forever.
// It never returns; when it cannot go on it powers the machine off.
func runInit(log *zap.Logger) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("init panicked", zap.Any("panic", p), zap.Stack("stack"))
			powerOff(log)
		}
	}()
	mountEarly(log)
	ensureConsole(log)
	loadModules(log, modulesDir, "order")
	if err := os.MkdirAll(lanesDir, 0o755); err != nil {
		log.Error("create lanes directory", zap.Error(err))
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Warn("read kernel command line", zap.Error(err))
	}
	path := channelFromCmdline(string(cmdline))
	srv := &agent.Server{Root: lanesDir, Layers: layersDir, Log: log.Named("server"), Version: version, Machine: true,
		LoadFS: func(fstype string) error {
			log.Info("loading deferred modules", zap.String("for", fstype))
			if n := loadModules(log, modulesDir, "lazy"); n == 0 {
				return fmt.Errorf("no deferred module loaded")
			}
			return nil
		}}
	backoff := 100 * time.Millisecond
	for {
		ch, err := openChannel(log, path, channelWait)
		if err != nil {
			log.Error("open agent channel", zap.String("path", path), zap.Error(err))
			powerOff(log)
		}
		fmt.Fprintf(os.Stderr, "%s on %s\n", agent.ReadyLine, path)
		start := time.Now()
		err = srv.Serve(ch)
		if cerr := ch.Close(); cerr != nil {
			log.Warn("close agent channel", zap.Error(cerr))
		}
		log.Warn("agent channel ended; serving again", zap.Error(err))
		// A channel that ends at once again and again must not spin.
		if time.Since(start) > 5*time.Second {
			backoff = 100 * time.Millisecond
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}

// mountEarly mounts the pseudo filesystems init needs. Failures are logged;
// an already mounted one (EBUSY) is fine.
func mountEarly(log *zap.Logger) {
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

// ensureConsole gives init stdin/stdout/stderr on /dev/console when the
// kernel found no console to open before /dev existed.
func ensureConsole(log *zap.Logger) {
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

// loadModules loads dir/<name> for each name in dir/<list> ("order" at
// boot, "lazy" for the filesystem modules deferred to their first mount),
// in order, and returns how many it loaded. EEXIST (already loaded or built
// in) is fine; other failures are logged.
func loadModules(log *zap.Logger, dir, list string) int {
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

// openChannel opens the agent's serial device, waiting up to wait for it to
// appear, and puts it in raw mode.
func openChannel(log *zap.Logger, path string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
		if err == nil {
			if err := makeRaw(f); err != nil {
				// Not every channel is a tty (a virtio-serial port is not).
				log.Info("channel left as is", zap.String("path", path), zap.Error(err))
			}
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// makeRaw is cfmakeraw(3) plus CLOCAL, 115200 baud, no flow control, VMIN=1, VTIME=0.
func makeRaw(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil {
			ioErr = fmt.Errorf("TCGETS: %w", err)
			return
		}
		t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR |
			unix.ICRNL | unix.IXON | unix.IXOFF | unix.IXANY
		t.Oflag &^= unix.OPOST
		t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Cflag &^= unix.CSIZE | unix.PARENB | unix.CRTSCTS | unix.CBAUD
		// The fastest rate a 16550 takes: QEMU paces the receive timeout
		// interrupt by the programmed rate (4 character times), so at the
		// default 9600 baud every short frame waits ~4 ms to be seen.
		t.Cflag |= unix.CS8 | unix.CLOCAL | unix.CREAD | unix.B115200
		t.Cc[unix.VMIN] = 1
		t.Cc[unix.VTIME] = 0
		if err := unix.IoctlSetTermios(int(fd), unix.TCSETS, t); err != nil {
			ioErr = fmt.Errorf("TCSETS: %w", err)
		}
	})
	if err != nil {
		return err
	}
	return ioErr
}

// powerOff ends the machine; PID 1 must never exit.
func powerOff(log *zap.Logger) {
	log.Error("powering off")
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	log.Error("power off failed; halting here", zap.Error(err))
	select {}
}
