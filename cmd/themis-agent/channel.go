package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/agent"
)

// Where and how long the agent looks for its channel.
const (
	// uartChannel is the fallback: the machine's second UART.
	uartChannel = "/dev/ttyS1"
	// portWait bounds the wait for the virtio port named agent.PortName on
	// a machine with a virtio console device: the port's name arrives from
	// the host over the device's control queue after the module has loaded
	// (milliseconds); only a machine whose console offers no such port
	// waits it out before the UART.
	portWait = 5 * time.Second
	// hostWait bounds the wait for the host end of a virtio port to be
	// connected after the port is opened.
	hostWait = 2 * time.Second
	// portPoll is how often the waits look again.
	portPoll = 10 * time.Millisecond
	// virtioConsoleID is the device id of a virtio console (virtio 1.x,
	// 5.3), as sysfs prints it.
	virtioConsoleID = "0x0003"
)

// channelDirs are where the agent looks for its channel; tests pass a fake tree.
type channelDirs struct {
	// Ports holds one entry per virtio-serial port ("vport1p1"), with a
	// name file once the host has named it: /sys/class/virtio-ports.
	Ports string
	// Devices holds one entry per virtio device, with a device file (its
	// id): /sys/bus/virtio/devices.
	Devices string
	// Dev holds the device nodes (devtmpfs, no udev): /dev.
	Dev string
}

// guestDirs are the guest's own.
var guestDirs = channelDirs{Ports: "/sys/class/virtio-ports", Devices: "/sys/bus/virtio/devices", Dev: "/dev"}

// channel is the device the agent serves on.
type channel struct {
	// Path is the device node.
	Path string
	// Port says it is a virtio-serial port: not a tty, and at end of file
	// until the host end is connected.
	Port bool
}

// pickChannel returns the agent's channel: override (themis.channel=) when
// it is set; else the virtio port named agent.PortName, waited for up to
// wait where the machine has a virtio console device; else the UART. A
// backend that offers the port therefore needs no kernel parameter, and one
// that offers only the UART costs no wait. What goes wrong is logged and
// means the UART.
func pickChannel(log *zap.Logger, dirs channelDirs, override string, wait time.Duration) channel {
	if override != "" {
		_, err := os.Stat(filepath.Join(dirs.Ports, filepath.Base(override)))
		return channel{Path: override, Port: err == nil}
	}
	has, err := hasVirtioConsole(dirs.Devices)
	if err != nil {
		log.Warn("look for a virtio console device; agent channel on the UART", zap.Error(err))
		return channel{Path: uartChannel}
	}
	if !has {
		log.Info("no virtio console device; agent channel on the UART", zap.String("path", uartChannel))
		return channel{Path: uartChannel}
	}
	t0 := time.Now()
	path, err := waitPort(dirs, agent.PortName, wait)
	if err != nil {
		log.Warn("no virtio port for the agent; agent channel on the UART", zap.String("port", agent.PortName), zap.String("path", uartChannel), zap.Error(err))
		return channel{Path: uartChannel}
	}
	log.Info("agent channel on a virtio port", zap.String("port", agent.PortName), zap.String("path", path), zap.Duration("waited", time.Since(t0)))
	return channel{Path: path, Port: true}
}

// hasVirtioConsole reports whether a device under dir is a virtio console.
// A missing dir (no virtio bus) has none.
func hasVirtioConsole(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read virtio devices: %w", err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "device"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // not a device entry
		}
		if err != nil {
			return false, fmt.Errorf("virtio device %s: %w", e.Name(), err)
		}
		if strings.TrimSpace(string(b)) == virtioConsoleID {
			return true, nil
		}
	}
	return false, nil
}

// waitPort waits up to wait for the port named name to be named in sysfs
// and to have its device node, and returns the node's path.
func waitPort(dirs channelDirs, name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		port, err := findPort(dirs.Ports, name)
		if err != nil {
			return "", err
		}
		if port != "" {
			node := filepath.Join(dirs.Dev, port)
			_, err := os.Stat(node)
			if err == nil {
				return node, nil
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("port %s: %w", port, err)
			}
		}
		if time.Now().After(deadline) {
			if port != "" {
				return "", fmt.Errorf("port %s named %q: no device node %s after %v", port, name, filepath.Join(dirs.Dev, port), wait)
			}
			return "", fmt.Errorf("no port named %q under %s after %v", name, dirs.Ports, wait)
		}
		time.Sleep(portPoll)
	}
}

// findPort returns the entry under dir ("vport1p1") whose name file holds
// name, or "" when none does (yet: a port's name file appears only once
// the host has named it). A missing dir has none.
func findPort(dir, name string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read virtio ports: %w", err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "name"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("virtio port %s: %w", e.Name(), err)
		}
		if strings.TrimSpace(string(b)) == name {
			return e.Name(), nil
		}
	}
	return "", nil
}
