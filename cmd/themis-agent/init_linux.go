package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/agent/inguest"
	"github.com/themisfs/themis/internal/pid1"
)

// Guest layout.
const (
	modulesDir = "/modules"
	lanesDir   = "/lanes"
	layersDir  = "/layers" // overlay lanes' layer mounts
)

// channelWait is how long init waits for the channel's device node to
// appear once it is chosen (pickChannel).
const channelWait = 10 * time.Second

// runInit is PID 1: set up the guest, then serve the agent channel forever.
// It never returns; when it cannot go on it powers the machine off.
func runInit(log *zap.Logger) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("init panicked", zap.Any("panic", p), zap.Stack("stack"))
			pid1.PowerOff(log)
		}
	}()
	if n := agentProcs(os.Getenv("GOMAXPROCS"), runtime.NumCPU()); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	pid1.MountEarly(log)
	pid1.EnsureConsole(log)
	pid1.LoadModules(log, modulesDir, "order")
	if err := os.MkdirAll(lanesDir, 0o755); err != nil {
		log.Error("create lanes directory", zap.Error(err))
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Warn("read kernel command line", zap.Error(err))
	}
	path := channelFromCmdline(string(cmdline))
	srv := &inguest.Server{Root: lanesDir, Layers: layersDir, Log: log.Named("server"), Version: version, Machine: true,
		LoadFS: func(fstype string) error {
			list := lazyList(fstype)
			log.Info("loading deferred modules", zap.String("for", fstype), zap.String("list", list))
			if n := pid1.LoadModules(log, modulesDir, list); n == 0 {
				return fmt.Errorf("no deferred module loaded from %s", list)
			}
			return nil
		}}
	dev := pickChannel(log, guestDirs, path, portWait)
	backoff := 100 * time.Millisecond
	for {
		ch, err := openChannel(log, dev, channelWait)
		if err != nil {
			log.Error("open agent channel", zap.String("path", dev.Path), zap.Error(err))
			pid1.PowerOff(log)
		}
		fmt.Fprintf(os.Stderr, "%s on %s\n", agent.ReadyLine, dev.Path)
		start := time.Now()
		err = srv.Serve(faultChannel(ch, log))
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

// openChannel opens the agent's channel, waiting up to wait for its device
// node to appear; a UART goes in raw mode, a virtio port (not a tty) waits
// for its host end.
func openChannel(log *zap.Logger, dev channel, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := os.OpenFile(dev.Path, os.O_RDWR|unix.O_NOCTTY, 0)
		if err == nil {
			if dev.Port {
				if err := waitHost(f, hostWait); err != nil {
					log.Warn("serving a virtio port whose host end is not connected", zap.Error(err))
				}
				return f, nil
			}
			if err := makeRaw(f); err != nil {
				// themis.channel= may name a device that is not a tty.
				log.Info("channel left as is", zap.String("path", dev.Path), zap.Error(err))
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

// lazyList is the module list to load for a filesystem the kernel does not
// know: /modules/lazy.<fstype> (its module and what only it needs) when the
// image has one, else /modules/lazy (every deferred module).
func lazyList(fstype string) string {
	valid := fstype != ""
	for _, r := range fstype {
		valid = valid && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}
	if valid {
		if _, err := os.Stat(filepath.Join(modulesDir, "lazy."+fstype)); err == nil {
			return "lazy." + fstype
		}
	}
	return "lazy"
}
