package qemu

import (
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/vmm"
)

// TestArgsAgentChannel: the agent's chardev is the host's socket on a
// virtio-serial port named themis.agent, or on the second UART; the
// console stays on the first UART either way.
func TestArgsAgentChannel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ch        vmm.AgentChannel
		want, not []string
	}{
		{ch: vmm.AgentVirtio,
			want: []string{"virtio-serial-pci,id=agentser,max_ports=2", "virtserialport,bus=agentser.0,nr=1,chardev=agent,name=themis.agent"},
			not:  []string{"isa-serial,chardev=agent,index=1"}},
		{ch: vmm.AgentUART,
			want: []string{"isa-serial,chardev=agent,index=1"},
			not:  []string{"virtio-serial-pci,id=agentser,max_ports=2"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.ch), func(t *testing.T) {
			t.Parallel()
			m := &Machine{cfg: vmm.Config{MemoryMiB: 128, AgentChannel: tt.ch, Kernel: "/k", Initramfs: "/i"}, ram: &ramFile{path: "/dev/shm/ram"}}
			args := m.args("/w/qmp.sock", "/w/agent.sock", "/w/state.qcow2")
			devices := flagValues(args, "-device")
			for _, w := range append(tt.want, "isa-serial,chardev=con,index=0") {
				if !slices.Contains(devices, w) {
					t.Errorf("no -device %s in %q", w, args)
				}
			}
			for _, n := range tt.not {
				if slices.Contains(devices, n) {
					t.Errorf("-device %s in %q", n, args)
				}
			}
			if chardevs := flagValues(args, "-chardev"); !slices.Contains(chardevs, "socket,id=agent,path=/w/agent.sock") {
				t.Errorf("agent chardev missing: %q", chardevs)
			}
		})
	}
}

// TestArgsICount: instruction counting is -icount with a fixed shift and
// no sleeping, and absent unless asked for.
func TestArgsICount(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		m := &Machine{cfg: vmm.Config{MemoryMiB: 128, ICount: on, Kernel: "/k", Initramfs: "/i"}, ram: &ramFile{path: "/dev/shm/ram"}}
		got := flagValues(m.args("/w/qmp.sock", "/w/agent.sock", "/w/state.qcow2"), "-icount")
		if want := map[bool][]string{true: {"shift=0,sleep=off"}}[on]; !slices.Equal(got, want) {
			t.Errorf("ICount %v: -icount %q, want %q", on, got, want)
		}
	}
}

// flagValues returns the value after every occurrence of flag.
func flagValues(args []string, flag string) []string {
	var v []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			v = append(v, args[i+1])
		}
	}
	return v
}

// TestArgsFailFast: the kernel's command line ends a guest at its first
// Oops, BUG or WARN (vmm.FailFastCmdline), after quiet (loglevel=5 must
// follow it to win), with the caller's Cmdline last; WarnNotFatal reaches
// it.
func TestArgsFailFast(t *testing.T) {
	t.Parallel()
	for _, notFatal := range []bool{false, true} {
		m := &Machine{cfg: vmm.Config{MemoryMiB: 128, Kernel: "/k", Initramfs: "/i", Cmdline: "themis.test=1", WarnNotFatal: notFatal}, ram: &ramFile{path: "/dev/shm/ram"}}
		app := flagValues(m.args("/w/qmp.sock", "/w/agent.sock", "/w/state.qcow2"), "-append")
		if len(app) != 1 {
			t.Fatalf("-append %q", app)
		}
		want := vmm.FailFastCmdline(notFatal)
		quiet, ff, last := strings.Index(app[0], " quiet "), strings.Index(app[0], want), strings.Index(app[0], "themis.test=1")
		if quiet < 0 || ff < quiet || last < ff {
			t.Errorf("WarnNotFatal %v: -append %q: want quiet, then %q, then the caller's", notFatal, app[0], want)
		}
	}
}
