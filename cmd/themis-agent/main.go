// Command themis-agent is the guest's /init: a static binary that sets up the
// guest (proc, sys, dev, modules) and serves the agent protocol on a serial
// channel for the lifetime of the machine. It is the only Themis code in the
// guest.
//
// As PID 1 it takes no flags (the kernel passes unknown boot parameters to
// init as arguments). It serves on the virtio-serial port named
// themis.agent (agent.PortName) where the machine has one: found by its
// name under /sys/class/virtio-ports (there is no udev), its node
// /dev/vportNpM from devtmpfs, waited for a few seconds only on a machine
// with a virtio console device. Else it serves on the second UART,
// /dev/ttyS1, in raw mode at 115200 baud. The kernel command line
// parameter themis.channel=<dev> overrides the choice. Once serving it
// prints agent.ReadyLine and the device on the console ("themis-agent:
// ready on /dev/vport1p1"), which the host waits for.
//
// Not as PID 1 it serves for tests: `themis-agent -stdio -root DIR` answers
// requests on stdin/stdout over the lanes under DIR.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/themisfs/themis/agent/inguest"
)

// version identifies the build; set with -ldflags "-X main.version=...".
var version = "dev"

func newLogger(level zapcore.Level) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), level)
	return zap.New(core).Named("themis-agent")
}

func main() {
	if os.Getpid() == 1 {
		runInit(newLogger(zapcore.InfoLevel)) // never returns
		return
	}
	stdio := flag.Bool("stdio", false, "serve on stdin/stdout instead of being init")
	root := flag.String("root", "/lanes", "directory holding one directory per lane")
	machine := flag.Bool("machine", false, "allow Mount, Umount, SetClock, DropCaches and Exec (they change this machine)")
	debug := flag.Bool("debug", false, "log at debug level")
	flag.Parse()
	if !*stdio {
		fmt.Fprintln(os.Stderr, "themis-agent: not PID 1; use -stdio -root DIR to serve on stdin/stdout")
		flag.Usage()
		os.Exit(2)
	}
	level := zapcore.InfoLevel
	if *debug {
		level = zapcore.DebugLevel
	}
	log := newLogger(level)
	srv := &inguest.Server{Root: *root, Log: log, Version: version, Machine: *machine}
	err := srv.Serve(struct {
		io.Reader
		io.Writer
	}{os.Stdin, os.Stdout})
	if err != nil {
		log.Error("serve", zap.Error(err))
		os.Exit(1)
	}
}

// minProcs is the agent's least GOMAXPROCS in the guest, whatever its vCPU
// count. With one P and none idle, the Go runtime's sysmon takes the P from
// a goroutine whose syscall outlasts its tick (20 µs and up) and hands it
// to another thread; under QEMU/TCG nearly every syscall lasts that long
// (mount, the walk's opens, a disk's reads), so each one costs thread
// handoffs and sysmon never backs off. Measured in the guest (TCG, one
// vCPU), GOMAXPROCS 1 / 2 / 4: the agent's stat 1.57 / 0.24 / 0.23 ms, a
// fingerprint of four entries 9.2 / 2.9 / 2.0 ms; bench explore (ext2,
// depth 3, remount) 15.3 / 22.9 / 26.4 states/s (docs/benchmarks.md).
const minProcs = 4

// agentProcs is the GOMAXPROCS init sets: at least minProcs, or 0 (leave
// it) when the GOMAXPROCS environment variable is set (a kernel command
// line parameter GOMAXPROCS=n reaches init's environment) or the machine
// has that many CPUs already.
func agentProcs(env string, ncpu int) int {
	if env != "" || ncpu >= minProcs {
		return 0
	}
	return minProcs
}

// channelFromCmdline returns the value of the last themis.channel= parameter
// on a kernel command line, or "" for none (the agent picks: pickChannel).
func channelFromCmdline(cmdline string) string {
	ch := ""
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "themis.channel="); ok && v != "" {
			ch = v
		}
	}
	return ch
}
