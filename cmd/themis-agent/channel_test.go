package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// fakeGuest is a fake /sys and /dev: virtio devices by id, ports by name
// ("" for a port the host has not named), device nodes.
type fakeGuest struct {
	devices map[string]string // virtio0 -> 0x0003
	ports   map[string]string // vport1p1 -> themis.agent
	nodes   []string          // vport1p1
}

func (g fakeGuest) make(t *testing.T) channelDirs {
	t.Helper()
	root := t.TempDir()
	dirs := channelDirs{Ports: filepath.Join(root, "ports"), Devices: filepath.Join(root, "devices"), Dev: filepath.Join(root, "dev")}
	for dev, id := range g.devices {
		writeFile(t, filepath.Join(dirs.Devices, dev, "device"), id+"\n")
	}
	for port, name := range g.ports {
		if name == "" {
			mkdir(t, filepath.Join(dirs.Ports, port))
			continue
		}
		writeFile(t, filepath.Join(dirs.Ports, port, "name"), name+"\n")
	}
	for _, n := range g.nodes {
		writeFile(t, filepath.Join(dirs.Dev, n), "")
	}
	return dirs
}

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestPickChannel(t *testing.T) {
	t.Parallel()
	console := map[string]string{"virtio0": "0x0002", "virtio1": "0x0003"}
	tests := []struct {
		name     string
		guest    fakeGuest
		override string
		want     string // "" is the UART
		port     bool
	}{
		{name: "no virtio bus", guest: fakeGuest{}},
		{name: "no console device", guest: fakeGuest{devices: map[string]string{"virtio0": "0x0002"}, ports: map[string]string{"vport0p1": "themis.agent"}, nodes: []string{"vport0p1"}}},
		{name: "the port", guest: fakeGuest{devices: console, ports: map[string]string{"vport1p1": "themis.agent"}, nodes: []string{"vport1p1"}}, want: "vport1p1", port: true},
		{name: "among others", guest: fakeGuest{devices: console,
			ports: map[string]string{"vport1p0": "", "vport1p1": "org.qemu.guest_agent.0", "vport1p2": "themis.agent", "vport1p3": "themis.agent.old"},
			nodes: []string{"vport1p0", "vport1p1", "vport1p2", "vport1p3"}}, want: "vport1p2", port: true},
		{name: "no node", guest: fakeGuest{devices: console, ports: map[string]string{"vport1p1": "themis.agent"}}},
		{name: "never named", guest: fakeGuest{devices: console, ports: map[string]string{"vport1p1": ""}, nodes: []string{"vport1p1"}}},
		{name: "no ports", guest: fakeGuest{devices: console}},
		{name: "other name", guest: fakeGuest{devices: console, ports: map[string]string{"vport1p1": "themis"}, nodes: []string{"vport1p1"}}},
		{name: "override uart", guest: fakeGuest{devices: console, ports: map[string]string{"vport1p1": "themis.agent"}, nodes: []string{"vport1p1"}}, override: "/dev/ttyS2", want: "/dev/ttyS2"},
		{name: "override port", guest: fakeGuest{devices: console, ports: map[string]string{"vport1p1": "other"}}, override: "/dev/vport1p1", want: "/dev/vport1p1", port: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dirs := tt.guest.make(t)
			got := pickChannel(zaptest.NewLogger(t), dirs, tt.override, 30*time.Millisecond)
			want := channel{Path: uartChannel, Port: tt.port}
			switch {
			case tt.override != "":
				want.Path = tt.want
			case tt.want != "":
				want.Path = filepath.Join(dirs.Dev, tt.want)
			}
			if got != want {
				t.Errorf("pickChannel = %+v, want %+v", got, want)
			}
		})
	}
}

// TestPickChannelWaits: the port's name and node appear after the agent
// started looking (the host names a port over the control queue).
func TestPickChannelWaits(t *testing.T) {
	t.Parallel()
	dirs := fakeGuest{devices: map[string]string{"virtio1": "0x0003"}, ports: map[string]string{"vport1p1": ""}}.make(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond)
		for _, f := range []string{filepath.Join(dirs.Dev, "vport1p1"), filepath.Join(dirs.Ports, "vport1p1", "name")} {
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Error(err)
				return
			}
			if err := os.WriteFile(f, []byte("themis.agent\n"), 0o644); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	got := pickChannel(zaptest.NewLogger(t), dirs, "", 10*time.Second)
	<-done
	if want := (channel{Path: filepath.Join(dirs.Dev, "vport1p1"), Port: true}); got != want {
		t.Errorf("pickChannel = %+v, want %+v", got, want)
	}
}

// TestFindPortErrors: an unreadable ports directory is an error, not
// "no port" (pickChannel then logs it and takes the UART).
func TestFindPortErrors(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "ports")
	writeFile(t, f, "not a directory")
	if _, err := findPort(f, "themis.agent"); err == nil {
		t.Error("findPort on a file: no error")
	}
	if got, err := findPort(filepath.Join(t.TempDir(), "missing"), "themis.agent"); got != "" || err != nil {
		t.Errorf("findPort on a missing dir = %q, %v; want none", got, err)
	}
}
