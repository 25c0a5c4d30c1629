package kvm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gokvm "github.com/bobuhiro11/gokvm/kvm"
	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/checkpoint"
	"github.com/themisfs/themis/vmm/kvm/devices"
	"github.com/themisfs/themis/vmm/kvm/linuxboot"
	"go.uber.org/zap"
)

// Linux guests on this backend: the kernel is entered through the 64-bit
// boot protocol (linuxboot), with the in-kernel irqchip and PIT, a 16550
// console on COM1, one legacy virtio-pci block device per disk, served from
// its overlay, and the agent channel (the same frames as on the QEMU
// backend) on a virtio console port named agentPortName, with COM2 (the
// agent's /dev/ttyS1) as the fallback for an agent that does not look for
// the port. Interrupts are PIC lines (noapic nolapic).
const (
	// linuxCmdline is the kernel command line before vmm.Config.Cmdline.
	// noapic/acpi=off: no firmware tables, PIC interrupts; nolapic: the
	// local APIC unused too, as the cloud kernel (no MP table support)
	// does by itself — the generic kernel, finding no tables, set its
	// local APIC up in virtual-wire mode and got no timer tick after it
	// (jiffies stopped at 0.016 s, the agent never ready; seen in the
	// emulated AMD-V host, docs/kvm.md); pci=conf1: PCI
	// through ports 0xcf8/0xcfc; reboot=k: a panic resets through the
	// i8042, which ends the run with the console tail; vmm.FailFastCmdline
	// follows it (a kernel fault panics; console loglevel 5).
	linuxCmdline = "console=ttyS0 panic=-1 reboot=k lpj=4000000 tsc=reliable no_timer_check mitigations=off " +
		"audit=0 selinux=0 apparmor=0 noapic nolapic acpi=off pci=conf1 i8042.noaux i8042.nokbd i8042.nopnp"
	// readyLine is what the agent prints on the console once it serves its channel.
	readyLine = agent.ReadyLine
	// MaxKernel and MaxInitramfs bound the files Start reads.
	MaxKernel    = 64 << 20
	MaxInitramfs = 1 << 30
	com1Base     = devices.COM1Port
	com2Base     = devices.COM2Port
	com1IRQ      = devices.COM1IRQ
	com2IRQ      = devices.COM2IRQ
	// agentPortName is the virtio console port of the agent channel, the
	// name the agent looks for in /sys/class/virtio-ports/*/name (and QEMU
	// gives its virtio-serial port).
	agentPortName   = agent.PortName
	agentConsoleIRQ = devices.ConsoleIRQ
)

// Agent channel names, for logs and diagnostics.
const (
	channelUART    = "uart"
	channelConsole = "virtio-console"
)

// diskIRQs are the PIC lines given to the disks, in attach order.
var diskIRQs = []uint8{5, 9, 10, 11, 14, 15}

// linuxGDT is the boot GDT the 64-bit boot protocol asks for: __BOOT_CS at
// 0x10 (64-bit code) and __BOOT_DS at 0x18 (flat data).
var linuxGDT = []uint64{0, 0, 0x00af9b000000ffff, 0x00cf93000000ffff}

// Machine is a Linux guest on /dev/kvm behind vmm.Machine: a VM (RAM,
// vCPU, fork tree) plus boot, devices, the agent channel and
// the disks' overlays in lockstep with the memory checkpoints.
type Machine struct {
	cfg vmm.Config
	log *zap.Logger
	vm  *VM

	console      *console
	com1, com2   *devices.UART
	rtc          *devices.RTC
	pci          *devices.PCIBus
	blocks       []*devices.Block
	vcon         *devices.Console  // the agent console (virtio), next to the disks on PCI
	vconSlot     int               // its PCI slot
	uart, vport  *stream           // the host ends of COM2 and of the agent console's port
	stream       *stream           // the agent channel: uart until the guest opens the port
	channel      string            // channelUART or channelConsole
	agent        *agent.Client     // on stream
	ports        portTable         // the devices at fixed ports
	absentAccess map[string]uint64 // absent legacy device or unclaimed port → accesses
	strictPorts  bool              // a port outside absentPorts fails the run (tests)
	unclaimed    int               // distinct unclaimed ports accessed
	sections     []deviceSection   // every device's part of a checkpoint (devstate_linux.go)

	mu      sync.Mutex // serializes the vmm.Machine methods
	closed  bool
	closing atomic.Bool      // Close has begun (set before it waits for m.mu)
	path    *checkpoint.Path // the checkpoints and the disks' overlays in lockstep
	boot    time.Duration

	runMu   sync.Mutex
	runDone chan struct{} // closed when the runner goroutine returns; nil when stopped
	dead    error         // why the guest stopped for good; nil while it can run
}

var (
	_ vmm.Machine          = (*Machine)(nil)
	_ vmm.Hasher           = (*Machine)(nil)
	_ vmm.Timings          = (*Machine)(nil)
	_ vmm.CheckpointMemory = (*Machine)(nil)
)

// ErrNoHardwareVirtualization is returned by Start on hosts whose /dev/kvm
// cannot run a stock Linux kernel (PVM: no vmx/svm).
var ErrNoHardwareVirtualization = errors.New("kvm: no hardware virtualization")

// Start boots cfg.Kernel with cfg.Initramfs and waits for the agent. On a
// host without vmx/svm it fails with ErrNoHardwareVirtualization unless
// allowSoftware is set (only tests do that, to watch the early boot; the
// kernel then dies on an instruction PVM cannot emulate).
func Start(ctx context.Context, cfg vmm.Config) (*Machine, error) {
	if ok, why := HardwareVirtualization(); !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoHardwareVirtualization, why)
	}
	return start(ctx, cfg, true)
}

// start builds and boots the machine; wait says whether to wait for the agent.
func start(ctx context.Context, cfg vmm.Config, wait bool) (m *Machine, err error) {
	if cfg, err = linuxConfig(cfg); err != nil {
		return nil, err
	}
	kernel, initrd, err := readImages(cfg)
	if err != nil {
		return nil, err
	}
	vm, err := NewVM(VMConfig{MemoryBytes: int64(cfg.MemoryMiB) << 20, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	if m, err = newMachine(cfg, vm); err != nil {
		return nil, errors.Join(err, vm.Close())
	}
	// Every error return below sets the named result m to nil before this
	// runs: close the machine built here through its own variable.
	built := m
	defer func() {
		if err != nil {
			err = errors.Join(err, built.Close())
			m = nil
		}
	}()
	t0 := time.Now()
	cmdline := strings.TrimSpace(linuxCmdline + " " + vmm.FailFastCmdline(cfg.WarnNotFatal) + " " + cfg.Cmdline)
	layout, err := linuxboot.Load(vm.mem, linuxboot.Params{Kernel: kernel, Initrd: initrd, Cmdline: cmdline})
	if err != nil {
		return nil, fmt.Errorf("kvm: load kernel %s: %w", cfg.Kernel, err)
	}
	if err := m.setupCPU(layout); err != nil {
		return nil, err
	}
	m.resume()
	if !wait {
		return m, nil
	}
	version, err := m.waitAgent(ctx)
	if err != nil {
		return nil, err
	}
	m.boot = time.Since(t0)
	m.log.Info("guest ready", zap.String("agent", version), zap.Duration("boot", m.boot))
	return m, nil
}

// linuxConfig fills in cfg's defaults and checks it before a VM exists.
func linuxConfig(cfg vmm.Config) (vmm.Config, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = vmm.DefaultMemoryMiB
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 60 * time.Second
	}
	if cfg.Restore == "" {
		cfg.Restore = vmm.RestoreDevices
	}
	switch {
	case cfg.Kernel == "":
		return cfg, errors.New("kvm: config: Kernel: no kernel image given")
	case cfg.MemoryMiB < 0 || int64(cfg.MemoryMiB)<<20 > MaxMemory:
		return cfg, fmt.Errorf("%w: config: MemoryMiB=%d: at most %d MiB", ErrTooLarge, cfg.MemoryMiB, MaxMemory>>20)
	case len(cfg.Disks) > len(diskIRQs):
		return cfg, fmt.Errorf("kvm: config: Disks: %d disks, at most %d", len(cfg.Disks), len(diskIRQs))
	case cfg.Restore != vmm.RestoreDevices && cfg.Restore != vmm.RestoreFull:
		return cfg, fmt.Errorf("kvm: config: Restore: unknown mode %q", cfg.Restore)
	case cfg.ICount:
		return cfg, errors.New("kvm: config: ICount: instruction counting is QEMU TCG's (-icount); KVM runs the guest's instructions natively")
	case cfg.AgentChannel != "" && cfg.AgentChannel != vmm.AgentVirtio && cfg.AgentChannel != vmm.AgentUART:
		return cfg, fmt.Errorf("kvm: config: AgentChannel: %q: want %q or %q", cfg.AgentChannel, vmm.AgentVirtio, vmm.AgentUART)
	}
	return cfg, nil
}

// readImages reads and checks the kernel and the initramfs.
func readImages(cfg vmm.Config) (kernel, initrd []byte, err error) {
	if kernel, err = readBounded(cfg.Kernel, MaxKernel, "kernel"); err != nil {
		return nil, nil, err
	}
	if cfg.Initramfs != "" {
		if initrd, err = readBounded(cfg.Initramfs, MaxInitramfs, "initramfs"); err != nil {
			return nil, nil, err
		}
	}
	if _, err := linuxboot.ParseHeader(kernel); err != nil {
		return nil, nil, fmt.Errorf("kvm: kernel %s: %w", cfg.Kernel, err)
	}
	return kernel, initrd, nil
}

// newMachine attaches the devices, the agent channel and the
// checkpoint path to vm; nothing runs yet.
func newMachine(cfg vmm.Config, vm *VM) (*Machine, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	m := &Machine{cfg: cfg, log: cfg.Log.Named("vmm.kvm.linux"), vm: vm, absentAccess: map[string]uint64{}}
	if err := m.setupDevices(); err != nil {
		return nil, err
	}
	m.path = checkpoint.New(checkpoint.Config{Backend: vmm.BackendKVM, Memory: linuxMemory{m}, Disks: cfg.Disks, Verify: cfg.Verify})
	vm.att = m
	return m, nil
}

// waitAgent waits for the agent's ready line and its first ping, and
// returns the agent's version.
func (m *Machine) waitAgent(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BootTimeout)
	defer cancel()
	if err := m.waitReady(ctx); err != nil {
		return "", err
	}
	m.pickChannel()
	resp, err := m.Call(ctx, &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
	if err != nil {
		return "", fmt.Errorf("kvm: boot: first ping: %w", err)
	}
	return resp.GetPing().GetVersion(), nil
}

func readBounded(path string, max int64, what string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("kvm: %s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("kvm: %s %s: not a regular file", what, path)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("kvm: %s %s: %d bytes, at most %d", what, path, fi.Size(), max)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kvm: %s: %w", what, err)
	}
	return b, nil
}

// setupCPU writes the boot GDT and enters the kernel's 64-bit entry with
// RSI at the zero page, interrupts off, the LAPIC in virtual wire mode.
func (m *Machine) setupCPU(l *linuxboot.Layout) error {
	vm := m.vm
	for i, d := range linuxGDT {
		binary.LittleEndian.PutUint64(vm.mem[GDTAddr+8*i:], d)
	}
	s, err := vm.Sregs()
	if err != nil {
		return err
	}
	s = longMode(s)
	s.CS.Selector = 0x10
	for _, seg := range []*Segment{&s.DS, &s.ES, &s.FS, &s.GS, &s.SS} {
		seg.Selector = 0x18
	}
	s.GDT = DTable{Base: GDTAddr, Limit: uint16(8*len(linuxGDT) - 1)}
	if err := vm.SetSregs(s); err != nil {
		return err
	}
	if err := vm.SetRegs(Regs{RIP: l.Entry, RSI: l.BootParams, RFLAGS: 2}); err != nil {
		return err
	}
	return vm.VirtualWire()
}

// VirtualWire sets LAPIC LINT0 to ExtINT (the PIC's interrupts reach the
// vCPU) and LINT1 to NMI, unmasked, as firmware leaves them.
func (m *VM) VirtualWire() error {
	var lapic LAPIC
	if _, err := ioctlPtr(m.vcpuFD, "KVM_GET_LAPIC", kvmGetLAPIC, &lapic); err != nil {
		return err
	}
	const lvt0, lvt1 = 0x350, 0x360
	const extINT, nmi = 7 << 8, 4 << 8
	set := func(off int, mode uint32) {
		v := binary.LittleEndian.Uint32(lapic.Regs[off:])
		v = v&^(7<<8|1<<16) | mode // delivery mode, unmasked
		binary.LittleEndian.PutUint32(lapic.Regs[off:], v)
	}
	set(lvt0, extINT)
	set(lvt1, nmi)
	_, err := ioctlPtr(m.vcpuFD, "KVM_SET_LAPIC", kvmSetLAPIC, &lapic)
	return err
}

// irqLine drives one PIC line with KVM_IRQ_LINE_STATUS.
type irqLine struct {
	vm   *VM
	line uint32
}

func (l irqLine) SetLevel(high bool) error {
	var level uint32
	if high {
		level = 1
	}
	_, err := gk("KVM_IRQ_LINE_STATUS", func() (uintptr, error) {
		return 0, gokvm.IRQLineStatus(uintptr(l.vm.vmFD), l.line, level)
	})
	return err
}

func (m *Machine) setupDevices() error {
	vm := m.vm
	m.console = newConsole(m.cfg.Console, readyLine)
	m.com1 = devices.NewUART(com1Base, irqLine{vm, com1IRQ}, m.console)
	m.uart = newStream(func(p []byte) error { return m.com2.Feed(p) }, devices.ErrRXFull)
	m.com2 = devices.NewUART(com2Base, irqLine{vm, com2IRQ}, writerFunc(m.uart.guestWrite))
	m.stream, m.channel = m.uart, channelUART
	m.agent = agent.NewClient(m.stream, m.log)
	m.rtc = devices.NewRTC(nil)
	m.pci = devices.NewPCIBus()
	// Loaded in this order: the bus before the devices on it.
	m.register(section("PCI", m.pci.State, m.pci.SetState))
	m.register(section("RTC", m.rtc.State, m.rtc.SetState))
	m.register(section("COM1", m.com1.State, m.com1.SetState))
	m.register(section("COM2", m.com2.State, m.com2.SetState))
	for i, d := range m.cfg.Disks {
		b, err := devices.NewBlock(d.Device, d.Serial, deviceRAM{vm}, irqLine{vm, uint32(diskIRQs[i])}, diskIRQs[i])
		if err != nil {
			return fmt.Errorf("kvm: disk %s: %w", d.Serial, err)
		}
		if _, err := m.pci.Add(b); err != nil {
			return fmt.Errorf("kvm: disk %s: %w", d.Serial, err)
		}
		m.blocks = append(m.blocks, b)
		m.register(section("block "+d.Serial, b.State, b.SetState))
	}
	if m.cfg.AgentChannel == vmm.AgentUART {
		m.ports = m.fixedPorts() // no agent console: the agent takes the UART at once
		return nil
	}
	m.vport = newStream(func(p []byte) error { return m.vcon.Feed(p) }, devices.ErrRXFull)
	vcon, err := devices.NewConsole(agentPortName, deviceRAM{vm}, irqLine{vm, agentConsoleIRQ}, agentConsoleIRQ, writerFunc(m.vport.guestWrite))
	if err != nil {
		return fmt.Errorf("kvm: agent console: %w", err)
	}
	slot, err := m.pci.Add(vcon)
	if err != nil {
		return fmt.Errorf("kvm: agent console: %w", err)
	}
	m.vcon, m.vconSlot = vcon, slot
	m.register(section("agent console", vcon.State, vcon.SetState))
	m.ports = m.fixedPorts()
	return nil
}

// streams are the host ends of both agent channels.
func (m *Machine) streams() []*stream {
	if m.vport == nil {
		return []*stream{m.uart}
	}
	return []*stream{m.uart, m.vport}
}

// pickChannel makes the agent console the agent channel when the guest
// has its port open once the agent says it is ready (the agent opens its
// channel before it prints the ready line, and Linux tells the device in
// open(2)); else the channel stays COM2.
func (m *Machine) pickChannel() {
	if m.vcon == nil {
		m.log.Info("agent channel", zap.String("channel", channelUART), zap.String("why", "asked for (AgentChannel uart)"))
		return
	}
	if !m.vcon.GuestOpen() {
		m.log.Info("agent channel", zap.String("channel", channelUART), zap.String("why", "the guest did not open port "+agentPortName))
		return
	}
	m.stream, m.channel = m.vport, channelConsole
	m.agent = agent.NewClient(m.stream, m.log)
	m.log.Info("agent channel", zap.String("channel", channelConsole), zap.String("port", agentPortName))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// fixedPorts is the table of the devices at fixed ports.
func (m *Machine) fixedPorts() portTable {
	return portTable{
		{portRange{com1Base, com1Base + devices.UARTPorts - 1, "COM1"}, m.com1},
		{portRange{com2Base, com2Base + devices.UARTPorts - 1, "COM2"}, m.com2},
		{portRange{devices.PCIConfigAddressPort, devices.PCIConfigAddressPort + devices.PCIConfigPorts - 1, "PCI configuration"}, m.pci},
		{portRange{devices.RTCIndexPort, devices.RTCIndexPort + devices.RTCPorts - 1, "CMOS RTC"}, m.rtc},
	}
}

// portIO implements attachment: the devices at fixed ports (m.ports),
// the PCI devices' I/O BARs, then the absent legacy devices.
func (m *Machine) portIO(port uint16, out bool, data []byte) (bool, error) {
	dev, ok := m.ports.lookup(port)
	if !ok {
		dev, ok = m.pci.Route(port)
	}
	if !ok {
		return m.absentIO(port, out, data)
	}
	if out {
		return true, dev.Out(port, data)
	}
	return true, dev.In(port, data)
}

// absentIO serves an access to a port no device of ours is at: a reset
// request ends the run; any other port reads all ones and drops writes,
// as on a PC where nothing answers (a generic kernel's Super I/O probe at
// 0x2e/0x4e, say), counted per device or port and logged the first time.
// With strictPorts a port outside absentPorts is not handled (the run
// fails naming it), for tests that want to see every probe.
func (m *Machine) absentIO(port uint16, out bool, data []byte) (bool, error) {
	if out && isReset(port, data) {
		return true, fmt.Errorf("the guest reset the machine (reboot, or a kernel panic with panic=-1)")
	}
	name := absentPort(port)
	if name == "" {
		if m.strictPorts {
			return false, nil
		}
		name = fmt.Sprintf("unclaimed port %#x", port)
		if m.absentAccess[name] == 0 {
			m.logUnclaimed(name, out)
		}
	}
	m.absentAccess[name]++
	if !out {
		for i := range data {
			data[i] = 0xff
		}
	}
	return true, nil
}

// maxUnclaimedLogged bounds the distinct unclaimed ports logged: a guest
// that walks every port logs this many lines, then one more.
const maxUnclaimedLogged = 64

// logUnclaimed logs the first access to an unclaimed port.
func (m *Machine) logUnclaimed(name string, out bool) {
	switch m.unclaimed++; {
	case m.unclaimed <= maxUnclaimedLogged:
		m.log.Info("port access with nothing there: reads all ones, writes dropped", zap.String("at", name), zap.Bool("write", out))
	case m.unclaimed == maxUnclaimedLogged+1:
		m.log.Info("more unclaimed ports: counted, not logged", zap.Int("logged", maxUnclaimedLogged))
	}
}

// resume starts the runner: KVM_RUN until Pause or the guest's end.
func (m *Machine) resume() {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if m.runDone != nil || m.dead != nil {
		return
	}
	done := make(chan struct{})
	m.runDone = done
	go func() {
		defer close(done)
		exit, err := m.vm.Run(context.Background())
		if err != nil && errors.Is(err, ErrPaused) {
			return
		}
		if err == nil {
			err = fmt.Errorf("guest stopped: %s at RIP %#x (code %d)", exit.Reason, exit.RIP, exit.Code)
		}
		m.runMu.Lock()
		m.dead = err
		m.runMu.Unlock()
		for _, st := range m.streams() {
			st.closeWith(fmt.Errorf("%w: %w", vmm.ErrGuestDied, err))
		}
		m.log.Warn("guest stopped", zap.Error(err))
	}()
}

// maxPauseWait bounds how long pause waits for the vCPU to leave KVM_RUN
// when the caller's context has no earlier deadline.
const maxPauseWait = 30 * time.Second

// pause stops the runner and waits for it; the vCPU is then out of KVM_RUN
// with its state consistent (pending I/O completed). A vCPU that does not
// stop within ctx (at most maxPauseWait) is an error: the guest is marked
// dead, and the caller must not touch vCPU state.
func (m *Machine) pause(ctx context.Context) error {
	m.runMu.Lock()
	done := m.runDone
	m.runMu.Unlock()
	if done == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxPauseWait)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if err := m.vm.Pause(); err != nil {
			m.log.Debug("pause", zap.Error(err))
		}
		select {
		case <-done:
			m.runMu.Lock()
			m.runDone = nil
			m.runMu.Unlock()
			return nil
		case <-ctx.Done():
			err := fmt.Errorf("kvm: the vCPU did not stop: %w", ctx.Err())
			m.runMu.Lock()
			if m.dead == nil {
				m.dead = err
			}
			m.runMu.Unlock()
			return err
		case <-tick.C:
			// Run had not started yet and cleared the request: again.
		}
	}
}

// deadErr is why the guest stopped for good, or nil.
func (m *Machine) deadErr() error {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	return m.dead
}

// died is the error of a guest that stopped for good: a
// vmm.GuestDiedError with the console's last lines (all of them written:
// the vCPU that wrote them has stopped).
func (m *Machine) died(err error) error {
	return &vmm.GuestDiedError{Err: err, Console: m.console.text(vmm.MaxDeathConsole), Shown: consoleTail}
}

func (m *Machine) waitReady(ctx context.Context) error {
	for {
		select {
		case <-m.console.seen:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("kvm: boot: no %q on the console: %w\nconsole:\n%s", readyLine, ctx.Err(), m.console.tail())
		case <-time.After(20 * time.Millisecond):
			if err := m.deadErr(); err != nil {
				return m.died(fmt.Errorf("during boot: %w", err))
			}
		}
	}
}

// Call implements vmm.Machine.
func (m *Machine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	if err := m.deadErr(); err != nil {
		return nil, m.died(err)
	}
	resp, err := m.agent.Call(ctx, req)
	if err != nil {
		if m.closing.Load() {
			return nil, fmt.Errorf("kvm: agent call: %w", vmm.ErrClosed)
		}
		if derr := m.deadErr(); derr != nil {
			return nil, m.died(derr)
		}
		return nil, fmt.Errorf("kvm: agent call: %w (%s)", err, m.diagnose())
	}
	return resp, nil
}

// Disks implements vmm.Machine.
func (m *Machine) Disks() []vmm.Disk { return slices.Clone(m.cfg.Disks) }

// RAMHash implements vmm.Hasher.
func (m *Machine) RAMHash(ctx context.Context) ([32]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return [32]byte{}, err
	}
	if err := m.pause(ctx); err != nil {
		return [32]byte{}, err
	}
	defer m.resume()
	return m.vm.RAMHash(ctx)
}

// Timings implements vmm.Timings (the path guards its timings; boot is
// set before the machine is returned).
func (m *Machine) Timings() vmm.TimingInfo { return m.path.Timings(m.boot) }

// CheckpointBytes implements vmm.CheckpointMemory: the VM's fork shadow
// (counted whole: it is populated as RAM is) and undo pages.
func (m *Machine) CheckpointBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vm.CheckpointBytes()
}

// Console returns the kept console lines (the last 400; for diagnostics and tests).
func (m *Machine) Console() string { return m.console.last(consoleKeep) }

// Close implements vmm.Machine: stops the vCPU and frees every fd and
// mapping. It first ends a call in progress (which holds m.mu while it
// waits for a guest that may never answer) by closing the agent channel.
func (m *Machine) Close() error {
	m.closing.Store(true)
	for _, st := range m.streams() {
		if st != nil {
			st.closeWith(vmm.ErrClosed)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	perr := m.pause(context.Background())
	m.runMu.Lock()
	if m.dead == nil {
		m.dead = vmm.ErrClosed
	}
	m.runMu.Unlock()
	for _, st := range m.streams() {
		if st != nil {
			st.closeWith(vmm.ErrClosed)
		}
	}
	return errors.Join(perr, m.vm.Close())
}
