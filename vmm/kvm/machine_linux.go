package kvm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gokvm "github.com/bobuhiro11/gokvm/kvm"
	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm/devices"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// VMConfig describes a VM.
type VMConfig struct {
	// MemoryBytes is guest RAM in bytes: a multiple of PageSize between
	// MinMemory and MaxMemory (default 64 MiB). RAM is a memfd mapped with
	// MAP_NORESERVE: only pages touched cost host memory.
	MemoryBytes int64
	// DirtyRing selects the per-vCPU dirty ring instead of the dirty bitmap.
	DirtyRing bool
	// DirtyRingBytes is the ring size in bytes (16 per entry, a power of two,
	// at most the host's KVM_CAP_DIRTY_LOG_RING; default DefaultDirtyRingBytes).
	// A run that overflows it fails with ErrRingOverflow.
	DirtyRingBytes int
	// NoIRQChip leaves out the in-kernel irqchip and PIT. Then HLT exits to
	// us (ExitHLT), and LAPIC, irqchip and PIT are not part of a checkpoint.
	// With the irqchip, HLT waits in the kernel for an interrupt, so guests
	// end with an OUT to DebugExitPort instead.
	NoIRQChip bool
	// Log is the logger (nil: none).
	Log *zap.Logger
}

// DefaultDirtyRingBytes is the default dirty ring: 65536 entries. Small
// rings overflow on PVM hosts (the kernel pushes past the soft limit).
const DefaultDirtyRingBytes = 1 << 20

// ExitReason says why Run returned without error.
type ExitReason int

const (
	// ExitHLT: the guest executed HLT (only without the in-kernel irqchip).
	ExitHLT ExitReason = iota + 1
	// ExitDebug: the guest wrote to DebugExitPort.
	ExitDebug
)

func (r ExitReason) String() string {
	switch r {
	case ExitHLT:
		return "HLT"
	case ExitDebug:
		return "DEBUG_EXIT"
	}
	return fmt.Sprintf("ExitReason(%d)", int(r))
}

// Exit is a normal end of Run.
type Exit struct {
	Reason ExitReason
	// Code is the value written to DebugExitPort.
	Code uint32
	// RIP is the guest RIP after the exit (past the HLT or OUT).
	RIP uint64
}

// Stats are the machine's counters and the durations of its last operations.
type Stats struct {
	// Arm is the duration of the root copy of RAM (first checkpoint).
	Arm time.Duration
	// ArmBytes is how many bytes the arm copied (the populated part of RAM).
	ArmBytes int64
	// Checkpoint and Restore are the durations of the last ones.
	Checkpoint, Restore time.Duration
	// RestorePages is the number of pages the last restore copied back.
	RestorePages int
	// RestoreHarvest, RestoreCopy and RestoreState split the last restore:
	// reading and re-arming the dirty log, copying pages back, setting the
	// vCPU, VM and device state.
	RestoreHarvest, RestoreCopy, RestoreState time.Duration
	// Exits counts vCPU exits served.
	Exits uint64
}

// checkpointState is everything but RAM at one checkpoint.
type checkpointState struct {
	vcpu    vcpuState
	vm      vmState
	scratch ScratchState
	devices *deviceState // the attached devices' state (Linux machines); nil without
}

// attachment is what a Linux machine adds to the VM: devices served on
// port I/O exits the VM does not serve itself, whose state is part of
// every checkpoint. portIO runs on the vCPU thread with the machine locked.
type attachment interface {
	// portIO serves one access of len(data) bytes; handled false means
	// no device is there (the VM then faults, naming the port).
	portIO(port uint16, out bool, data []byte) (handled bool, err error)
	// saveDevices returns the attached devices' state.
	saveDevices() *deviceState
	// loadDevices puts the attached devices back to s.
	loadDevices(s *deviceState) error
}

// VM is one KVM virtual machine with one vCPU, running a synthetic 64-bit
// guest on its own or a Linux guest inside a Machine, with
// checkpoints whose restore costs O(pages dirtied since).
//
// Its methods are safe for concurrent use and serialized, except Pause,
// which stops a Run in progress.
type VM struct {
	mu  sync.Mutex
	cfg VMConfig
	log *zap.Logger

	closed                   bool
	sysFD, vmFD, vcpuFD, mfd int
	run                      []byte // the vCPU's kvm_run
	ring                     []byte // dirty ring (DirtyRing)
	ringNext                 uint32
	mem                      []byte // guest RAM
	shadow                   []byte // fork shadow, mapped at arm
	bitmap                   []uint64
	manualProtect            bool
	hasXSAVE                 bool
	hasXCRS, hasClock        bool
	ringFullOK               bool // the host's DIRTY_RING_FULL exits can be trusted
	msrIndices               []uint32
	cpuid                    *cpuid2

	att     attachment // nil for synthetic guests
	tree    *fork.Tree
	states  map[fork.ID]*checkpointState
	scratch ScratchState
	stats   Stats

	// The vCPU thread: KVM_RUN always runs on one locked OS thread (KVM pays
	// a synchronize_rcu when a vCPU moves between threads) and Pause signals it.
	runCh      chan chan runResult
	threadDone chan struct{}
	tid        atomic.Int32
	pauseReq   atomic.Bool
	mapMu      sync.RWMutex // guards run against munmap while Pause writes it
}

type runResult struct {
	exit Exit
	err  error
}

var _ vmm.Hasher = (*VM)(nil)
var _ vmm.Timings = (*VM)(nil)
var _ vmm.CheckpointMemory = (*VM)(nil)

// NewVM creates the VM, its RAM, memslot, vCPU (in long mode, RIP at
// CodeAddr; the code is LoadProgram's) and, unless NoIRQChip, the in-kernel
// irqchip and PIT. On error everything created so far is released.
func NewVM(cfg VMConfig) (*VM, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("kvm: synthetic guests need amd64, not %s: %w", runtime.GOARCH, errors.ErrUnsupported)
	}
	if cfg.MemoryBytes == 0 {
		cfg.MemoryBytes = 64 << 20
	}
	switch {
	case cfg.MemoryBytes > MaxMemory:
		return nil, fmt.Errorf("%w: %d bytes requested, at most %d (3 GiB: one memslot below the 32-bit MMIO hole)",
			ErrTooLarge, cfg.MemoryBytes, MaxMemory)
	case cfg.MemoryBytes < MinMemory || cfg.MemoryBytes%PageSize != 0:
		return nil, fmt.Errorf("kvm: guest RAM of %d bytes: want a multiple of %d of at least %d", cfg.MemoryBytes, PageSize, MinMemory)
	}
	if cfg.DirtyRingBytes == 0 {
		cfg.DirtyRingBytes = DefaultDirtyRingBytes
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	m := &VM{
		cfg: cfg, log: cfg.Log.Named("vmm.kvm"),
		sysFD: -1, vmFD: -1, vcpuFD: -1, mfd: -1,
		states:     map[fork.ID]*checkpointState{},
		runCh:      make(chan chan runResult),
		threadDone: make(chan struct{}),
	}
	if err := m.setup(); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

// setup builds the VM step by step; on error the caller closes what exists.
func (m *VM) setup() error {
	for _, step := range []func() error{
		m.openKVM, m.checkCaps, m.createVM, m.setupDirtyLog, m.setupRAM, m.setupVCPU,
		m.setupCPUID, m.setupMSRList, m.enterLongMode,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	ready := make(chan struct{})
	go m.vcpuThread(ready)
	<-ready
	return nil
}

// openKVM opens /dev/kvm and checks the API version.
func (m *VM) openKVM() error {
	var err error
	if m.sysFD, err = unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("kvm: open /dev/kvm: %w", err)
	}
	v, err := gk("KVM_GET_API_VERSION", func() (uintptr, error) { return gokvm.GetAPIVersion(uintptr(m.sysFD)) })
	if err != nil {
		return err
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("kvm: API version %d, want %d", v, kvmAPIVersion)
	}
	return nil
}

// checkExtension is KVM_CHECK_EXTENSION on /dev/kvm.
func (m *VM) checkExtension(c uintptr) (int, error) {
	return gk("KVM_CHECK_EXTENSION", func() (uintptr, error) { return gokvm.CheckExtension(uintptr(m.sysFD), gokvm.Capability(c)) })
}

// checkCaps refuses a host without the capabilities the VM needs and notes
// the optional ones (XSAVE; XCRs and the KVM clock are saved only where the
// host has them).
func (m *VM) checkCaps() error {
	for _, c := range []struct {
		cap  uintptr
		name string
		need bool
	}{
		{capUserMemory, "KVM_CAP_USER_MEMORY", true},
		{capImmediateExit, "KVM_CAP_IMMEDIATE_EXIT", true},
		{capIRQChip, "KVM_CAP_IRQCHIP", !m.cfg.NoIRQChip},
		{capPIT2, "KVM_CAP_PIT2", !m.cfg.NoIRQChip},
		{capVCPUEvents, "KVM_CAP_VCPU_EVENTS", true},
		{capDebugRegs, "KVM_CAP_DEBUGREGS", true},
	} {
		n, err := m.checkExtension(c.cap)
		if err != nil {
			return err
		}
		if n == 0 && c.need {
			return fmt.Errorf("kvm: host lacks %s: %w", c.name, errors.ErrUnsupported)
		}
	}
	for _, c := range []struct {
		cap  uintptr
		have *bool
	}{{capXSAVE, &m.hasXSAVE}, {capXCRS, &m.hasXCRS}, {capAdjustClock, &m.hasClock}} {
		n, err := m.checkExtension(c.cap)
		if err != nil {
			return err
		}
		*c.have = n > 0
	}
	return nil
}

// createVM creates the VM and, unless NoIRQChip, the in-kernel irqchip and PIT.
func (m *VM) createVM() error {
	var err error
	if m.vmFD, err = gk("KVM_CREATE_VM", func() (uintptr, error) { return gokvm.CreateVM(uintptr(m.sysFD)) }); err != nil {
		return err
	}
	unix.CloseOnExec(m.vmFD)
	if m.cfg.NoIRQChip {
		return nil
	}
	if _, err := gk("KVM_CREATE_IRQCHIP", func() (uintptr, error) { return 0, gokvm.CreateIRQChip(uintptr(m.vmFD)) }); err != nil {
		return err
	}
	// gokvm's CreatePIT2 passes no flags, which leaves port 0x61 (system
	// control port B: the PIT channel 2 gate and output the kernel reads
	// while calibrating its timers) to us. With KVM_PIT_SPEAKER_DUMMY the
	// in-kernel PIT owns it, next to the channel 2 it reflects.
	pit := pitConfig{Flags: pitSpeakerDummy}
	_, err = ioctlPtr(m.vmFD, "KVM_CREATE_PIT2", kvmCreatePIT2, &pit)
	return err
}

// setupDirtyLog enables the dirty ring (DirtyRing) or, for the bitmap,
// manual protect where the host offers it.
func (m *VM) setupDirtyLog() error {
	if !m.cfg.DirtyRing {
		n, err := m.checkExtension(capManualDirtyLogProt2)
		if err != nil {
			return err
		}
		if n&dirtyLogManualProtect != 0 {
			if _, err := ioctlPtr(m.vmFD, "KVM_ENABLE_CAP(KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2)", kvmEnableCap,
				&enableCap{Cap: capManualDirtyLogProt2, Args: [4]uint64{dirtyLogManualProtect}}); err != nil {
				return err
			}
			m.manualProtect = true
		}
		m.bitmap = make([]uint64, (m.cfg.MemoryBytes/PageSize+63)/64)
		return nil
	}
	// Measured: on PVM hosts the ring fills past its soft limit and
	// entries are overwritten before the DIRTY_RING_FULL exit.
	m.ringFullOK, _ = HardwareVirtualization()
	max, err := m.checkExtension(capDirtyLogRing)
	if err != nil {
		return err
	}
	b := m.cfg.DirtyRingBytes
	if max == 0 {
		return fmt.Errorf("kvm: host has no dirty ring: %w", errors.ErrUnsupported)
	}
	if b < PageSize || b&(b-1) != 0 || b > max {
		return fmt.Errorf("kvm: dirty ring of %d bytes: want a power of two between %d and %d", b, PageSize, max)
	}
	_, err = ioctlPtr(m.vmFD, "KVM_ENABLE_CAP(KVM_CAP_DIRTY_LOG_RING)", kvmEnableCap,
		&enableCap{Cap: capDirtyLogRing, Args: [4]uint64{uint64(b)}})
	return err
}

// setupRAM creates guest RAM (a memfd mapped MAP_SHARED|MAP_NORESERVE) and
// its memslot, with dirty logging.
func (m *VM) setupRAM() error {
	var err error
	if m.mfd, err = unix.MemfdCreate("themis-guest-ram", unix.MFD_CLOEXEC); err != nil {
		return fmt.Errorf("kvm: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(m.mfd, m.cfg.MemoryBytes); err != nil {
		return fmt.Errorf("kvm: size guest RAM: %w", err)
	}
	if m.mem, err = unix.Mmap(m.mfd, 0, int(m.cfg.MemoryBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE); err != nil {
		return fmt.Errorf("kvm: mmap guest RAM: %w", err)
	}
	region := userspaceMemoryRegion{Slot: 0, Flags: memLogDirtyPages, MemorySize: uint64(len(m.mem)), UserspaceAddr: addrOf(m.mem)}
	_, err = ioctlPtr(m.vmFD, "KVM_SET_USER_MEMORY_REGION", kvmSetUserMemoryRegion, &region)
	return err
}

// setupVCPU creates the vCPU and maps its kvm_run (and its dirty ring).
func (m *VM) setupVCPU() error {
	var err error
	if m.vcpuFD, err = gk("KVM_CREATE_VCPU", func() (uintptr, error) { return gokvm.CreateVCPU(uintptr(m.vmFD), 0) }); err != nil {
		return err
	}
	unix.CloseOnExec(m.vcpuFD)
	size, err := gk("KVM_GET_VCPU_MMAP_SIZE", func() (uintptr, error) { return gokvm.GetVCPUMMmapSize(uintptr(m.sysFD)) })
	if err != nil {
		return err
	}
	if m.run, err = unix.Mmap(m.vcpuFD, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("kvm: mmap kvm_run: %w", err)
	}
	if m.cfg.DirtyRing {
		// Exactly the ring's size: mapping more gives SIGBUS on access.
		if m.ring, err = unix.Mmap(m.vcpuFD, dirtyLogPageOffset*int64(unix.Getpagesize()), m.cfg.DirtyRingBytes,
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			return fmt.Errorf("kvm: mmap dirty ring: %w", err)
		}
	}
	return nil
}

// enterLongMode builds the identity-mapped page tables and puts the vCPU
// in long mode at CodeAddr.
func (m *VM) enterLongMode() error {
	buildPageTables(m.mem)
	s, err := m.Sregs()
	if err != nil {
		return err
	}
	if err := m.SetSregs(longMode(s)); err != nil {
		return err
	}
	return m.SetRegs(Regs{RIP: CodeAddr, RSP: StackTop, RFLAGS: 2})
}

func (m *VM) setupCPUID() error {
	m.cpuid = &cpuid2{N: maxCPUID}
	if _, err := ioctlPtr(m.sysFD, "KVM_GET_SUPPORTED_CPUID", kvmGetSupportedCPUID, m.cpuid); err != nil {
		return err
	}
	hidePVFeatures(m.cpuid)
	_, err := ioctlPtr(m.vcpuFD, "KVM_SET_CPUID2", kvmSetCPUID2, m.cpuid)
	return err
}

// KVM paravirtual features (CPUID 0x40000001 EAX) whose state lives partly
// in the host kernel, where no ioctl saves it, and partly in guest RAM,
// which a restore puts back: PV EOI (a pending-EOI flag KVM keeps beside
// the LAPIC: restored out of step with the guest's flag, an ISR bit is
// never cleared and that interrupt stops for good), async page faults
// (tokens queued in the host), steal time and the preempted flag, PV
// unhalt, PV TLB flush and poll control. The guest runs without them; the
// kvmclock (saved with KVM_GET_CLOCK) and no-op io delay stay.
const (
	kvmCPUIDFeatures = 0x40000001
	kvmPVHidden      = 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<9 | 1<<10 | 1<<12 | 1<<13 | 1<<14 // ASYNC_PF, STEAL_TIME, PV_EOI, PV_UNHALT, PV_TLB_FLUSH, ASYNC_PF_VMEXIT, POLL_CONTROL, PV_SCHED_YIELD, ASYNC_PF_INT
)

func hidePVFeatures(c *cpuid2) {
	for i := range c.Entries[:c.N] {
		if e := &c.Entries[i]; e.Function == kvmCPUIDFeatures {
			e.EAX &^= kvmPVHidden
		}
	}
}

func (m *VM) setupMSRList() error {
	l := &msrList{N: uint32(len(msrList{}.Indices))}
	if _, err := ioctlPtr(m.sysFD, "KVM_GET_MSR_INDEX_LIST", kvmGetMSRIndexList, l); err != nil {
		return err
	}
	have := l.Indices[:l.N]
	for _, idx := range checkpointMSRs {
		if slices.Contains(have, idx) {
			m.msrIndices = append(m.msrIndices, idx)
		}
	}
	return nil
}

// RAM is guest memory. Reading it is always fine while the vCPU is stopped;
// the host must write it through WriteRAM, so that checkpoints see the write.
func (m *VM) RAM() []byte { return m.mem }

// WriteRAM copies data into guest RAM at guest-physical addr and marks the
// pages dirty for the next checkpoint or restore (the KVM dirty log sees
// only the guest's writes).
func (m *VM) WriteRAM(addr uint64, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	return m.writeRAM(addr, data)
}

// deviceRAM is guest RAM as the attached devices see it for DMA: every
// range a device takes is marked dirty for the next checkpoint or restore,
// since KVM's dirty log sees only the guest's own writes (the virtio-blk
// used ring and read buffers are written by us). Devices run on the vCPU
// thread inside Run, which holds m.mu, so this takes no lock.
type deviceRAM struct{ m *VM }

var _ devices.Memory = deviceRAM{}

// Slice implements devices.Memory. Ranges the device only reads are marked
// too (the interface does not tell them apart): they cost a page copy at
// restore, never a wrong restore.
func (r deviceRAM) Slice(addr, n uint64) ([]byte, error) {
	b, err := devices.RAM(r.m.mem).Slice(addr, n)
	if err != nil || n == 0 || r.m.tree == nil {
		return b, err
	}
	for p := addr / PageSize; p <= (addr+n-1)/PageSize; p++ {
		r.m.tree.Dirty().Add(int(p))
	}
	return b, nil
}

func (m *VM) writeRAM(addr uint64, data []byte) error {
	if addr > uint64(len(m.mem)) || uint64(len(data)) > uint64(len(m.mem))-addr {
		return fmt.Errorf("kvm: write of %d bytes at %#x is outside guest RAM (%#x bytes)", len(data), addr, len(m.mem))
	}
	copy(m.mem[addr:], data)
	if m.tree != nil && len(data) > 0 {
		for p := addr / PageSize; p <= (addr+uint64(len(data))-1)/PageSize; p++ {
			m.tree.Dirty().Add(int(p))
		}
	}
	return nil
}

// LoadProgram copies code to CodeAddr and resets the general registers:
// RIP=CodeAddr, RSP=StackTop. Segment and control registers are left as they
// are (long mode after New).
func (m *VM) LoadProgram(code []byte) error {
	if len(code) > MaxCode {
		return fmt.Errorf("kvm: program of %d bytes, at most %d", len(code), MaxCode)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	if err := m.writeRAM(CodeAddr, code); err != nil {
		return err
	}
	return m.SetRegs(Regs{RIP: CodeAddr, RSP: StackTop, RFLAGS: 2})
}

// Scratch returns the scratch device's state.
func (m *VM) Scratch() ScratchState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scratch
}

// Run runs the vCPU until the guest halts (NoIRQChip), writes DebugExitPort,
// faults (an *ExitError wrapping ErrGuestFault, naming exit reason and RIP),
// or is paused by Pause or ctx (an *ExitError wrapping ErrPaused and ctx's
// error). After any of these the machine can be restored or run again.
func (m *VM) Run(ctx context.Context) (Exit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Exit{}, vmm.ErrClosed
	}
	m.pauseReq.Store(false)
	m.run[runImmediateExit] = 0
	reply := make(chan runResult, 1)
	m.runCh <- reply
	select {
	case r := <-reply:
		return r.exit, r.err
	case <-ctx.Done():
		if err := m.Pause(); err != nil {
			m.log.Warn("pause for context failed", zap.Error(err))
		}
		r := <-reply
		var ee *ExitError
		if errors.As(r.err, &ee) && errors.Is(ee.Err, ErrPaused) {
			ee.Detail = "context: " + context.Cause(ctx).Error()
			ee.Err = errors.Join(ErrPaused, context.Cause(ctx))
		}
		return r.exit, r.err
	}
}

// Pause makes a Run in progress return ErrPaused at once: it sets
// immediate_exit and sends SIGURG to the vCPU thread, which the Go runtime
// ignores but which makes KVM_RUN return EINTR. Without a Run in progress
// it does nothing lasting (the next Run clears the request).
func (m *VM) Pause() error {
	m.mapMu.RLock()
	defer m.mapMu.RUnlock()
	if m.run == nil {
		return vmm.ErrClosed
	}
	m.pauseReq.Store(true)
	m.run[runImmediateExit] = 1
	if tid := m.tid.Load(); tid != 0 {
		if err := unix.Tgkill(unix.Getpid(), int(tid), unix.SIGURG); err != nil {
			return fmt.Errorf("kvm: signal vcpu thread: %w", err)
		}
	}
	return nil
}

func (m *VM) vcpuThread(ready chan<- struct{}) {
	runtime.LockOSThread()
	// Never unlocked: the thread is discarded when this goroutine ends, with
	// whatever signal state the pauses left on it.
	m.tid.Store(int32(unix.Gettid()))
	close(ready)
	for reply := range m.runCh {
		e, err := m.runLoop()
		reply <- runResult{e, err}
	}
	m.tid.Store(0)
	close(m.threadDone)
}

func (m *VM) rip() uint64 {
	r, err := m.Regs()
	if err != nil {
		return ^uint64(0)
	}
	return r.RIP
}

func (m *VM) fault(reason, detail string) error {
	return &ExitError{Reason: reason, RIP: m.rip(), Detail: detail, Err: ErrGuestFault}
}

// settle completes a pending I/O exit without running guest code (KVM_RUN
// with immediate_exit), so that registers and RIP are consistent for a
// checkpoint or a restore.
func (m *VM) settle() error {
	m.run[runImmediateExit] = 1
	errno := runOnce(m.vcpuFD)
	if !m.pauseReq.Load() {
		m.run[runImmediateExit] = 0
	}
	switch errno {
	case unix.EINTR:
		return nil
	case 0:
		return fmt.Errorf("kvm: KVM_RUN with immediate_exit returned exit %d instead of EINTR", binary.LittleEndian.Uint32(m.run[runExitReason:]))
	default:
		return &IoctlError{Op: "KVM_RUN", Err: errno}
	}
}

// runLoop runs on the vCPU thread.
func (m *VM) runLoop() (Exit, error) {
	for {
		switch errno := runOnce(m.vcpuFD); errno {
		case 0:
		case unix.EINTR:
			if m.pauseReq.Load() {
				return Exit{}, &ExitError{Reason: "PAUSED", RIP: m.rip(), Err: ErrPaused}
			}
			continue // a signal meant for the Go runtime (preemption): go on
		case unix.EAGAIN:
			continue
		case unix.EFAULT:
			return Exit{}, &IoctlError{Op: "KVM_RUN", Err: fmt.Errorf("%w (guest memory not accessible)", errno)}
		default:
			return Exit{}, &IoctlError{Op: "KVM_RUN", Err: errno}
		}
		m.stats.Exits++
		reason := binary.LittleEndian.Uint32(m.run[runExitReason:])
		x := m.run[runExit:]
		switch reason {
		case exitIO:
			e, done, err := m.serveIO(x)
			if err != nil || done {
				if serr := m.settle(); serr != nil {
					return Exit{}, errors.Join(err, serr)
				}
				if done {
					e.RIP = m.rip()
				}
				return e, err
			}
		case exitHLT:
			return Exit{Reason: ExitHLT, RIP: m.rip()}, nil
		case exitMMIO:
			addr := binary.LittleEndian.Uint64(x[mmioExitPhysAddr:])
			n := binary.LittleEndian.Uint32(x[mmioExitLen:])
			dir := "read"
			if x[mmioExitIsWrite] != 0 {
				dir = "write"
			}
			err := m.fault("MMIO", fmt.Sprintf("%d-byte %s at guest-physical %#x: no device there (MMIO unsupported)", n, dir, addr))
			for i := range 8 {
				x[mmioExitData+i] = 0xff
			}
			return Exit{}, errors.Join(err, m.settle())
		case exitShutdown:
			return Exit{}, m.fault("SHUTDOWN", "triple fault")
		case exitFailEntry:
			return Exit{}, m.fault("FAIL_ENTRY", fmt.Sprintf("hardware entry failure reason %#x", binary.LittleEndian.Uint64(x[0:])))
		case exitInternalError:
			sub := binary.LittleEndian.Uint32(x[0:])
			nd := min(binary.LittleEndian.Uint32(x[4:]), 16)
			data := make([]uint64, nd)
			for i := range data {
				data[i] = binary.LittleEndian.Uint64(x[8+8*i:])
			}
			return Exit{}, m.fault("INTERNAL_ERROR", fmt.Sprintf("suberror %d%s, data %#x", sub, internalSuberror(sub), data))
		case exitSystemEvent:
			return Exit{}, m.fault("SYSTEM_EVENT", fmt.Sprintf("type %d", binary.LittleEndian.Uint32(x[0:])))
		case exitDirtyRingFull:
			if !m.ringFullOK {
				return Exit{}, fmt.Errorf("%w: DIRTY_RING_FULL exit at RIP %#x on a host without hardware virtualization, "+
					"whose kernel pushes past the soft limit; use a ring larger than the pages dirtied between checkpoints", ErrRingOverflow, m.rip())
			}
			// Harvest now, into the tree (or nowhere, before arm), to go on.
			before := m.ringNext
			if err := m.harvestRing(m.dirtyTarget()); err != nil {
				return Exit{}, err
			}
			if m.ringNext == before {
				return Exit{}, fmt.Errorf("%w: DIRTY_RING_FULL exit with no entry to harvest", ErrRingOverflow)
			}
		case exitIRQWindowOpen, exitIntr:
		default:
			name := exitNames[reason]
			if name == "" {
				name = fmt.Sprintf("exit %d", reason)
			}
			return Exit{}, m.fault(name, "exit reason not handled")
		}
	}
}

func internalSuberror(s uint32) string {
	switch s {
	case 1:
		return " (emulation failure)"
	case 2:
		return " (simultaneous exceptions)"
	case 3:
		return " (delivery event failure)"
	}
	return ""
}

// ioExit is a decoded KVM_EXIT_IO: count accesses of size bytes each to
// port, their data at off in kvm_run.
type ioExit struct {
	out         bool
	size, count int
	port        uint16
	off         int
}

// decodeIO reads the io member of kvm_run's exit union x.
func (m *VM) decodeIO(x []byte) (ioExit, error) {
	e := ioExit{
		out:   x[ioExitDirection] == 1,
		size:  int(x[ioExitSize]),
		port:  binary.LittleEndian.Uint16(x[ioExitPort:]),
		count: int(binary.LittleEndian.Uint32(x[ioExitCount:])),
		off:   int(binary.LittleEndian.Uint64(x[ioExitDataOffset:])),
	}
	if e.size != 1 && e.size != 2 && e.size != 4 || e.off+e.size*e.count > len(m.run) {
		return e, m.fault("IO", fmt.Sprintf("malformed I/O exit: port %#x size %d count %d", e.port, e.size, e.count))
	}
	return e, nil
}

// access is the data of access i of e, inside kvm_run.
func (m *VM) access(e ioExit, i int) []byte { return m.run[e.off+i*e.size : e.off+(i+1)*e.size] }

// word is access i of e as a little-endian value.
func (m *VM) word(e ioExit, i int) uint32 {
	var b [4]byte
	copy(b[:], m.access(e, i))
	return binary.LittleEndian.Uint32(b[:])
}

// serveIO serves one port I/O exit; done means Run should return e: the
// VM's own ports (the scratch register, the debug exit) first, then the
// attached devices.
func (m *VM) serveIO(x []byte) (exit Exit, done bool, err error) {
	e, err := m.decodeIO(x)
	if err != nil {
		return Exit{}, false, err
	}
	switch {
	case e.port == ScratchPort && e.out:
		for i := range e.count {
			m.scratch.Value = m.word(e, i)
			m.scratch.Writes++
		}
	case e.port == ScratchPort:
		for i := range e.count {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], m.scratch.Value)
			copy(m.access(e, i), b[:e.size])
		}
	case e.port == DebugExitPort && e.out:
		return Exit{Reason: ExitDebug, Code: m.word(e, e.count-1)}, true, nil
	case m.att != nil:
		return Exit{}, false, m.attachedIO(e)
	default:
		return Exit{}, false, m.unknownPort(e.port, e.out, e.size, e.count)
	}
	return Exit{}, false, nil
}

// attachedIO serves every access of e through the attached devices.
func (m *VM) attachedIO(e ioExit) error {
	for i := range e.count {
		handled, err := m.att.portIO(e.port, e.out, m.access(e, i))
		if err != nil {
			return m.fault("IO", fmt.Sprintf("port %#x: %v", e.port, err))
		}
		if !handled {
			return m.unknownPort(e.port, e.out, e.size, e.count)
		}
	}
	return nil
}

// unknownPort fails the run for an access to a port no device serves; an
// IN gets all ones, as on a bus with nothing there.
func (m *VM) unknownPort(port uint16, out bool, size, count int) error {
	dir := "OUT to"
	if !out {
		dir = "IN from"
		off := int(binary.LittleEndian.Uint64(m.run[runExit+ioExitDataOffset:]))
		for i := range size * count {
			m.run[off+i] = 0xff
		}
	}
	return m.fault("IO", fmt.Sprintf("%s unknown port %#x (size %d)", dir, port, size))
}

// dirtyTarget is where harvested dirty pages go: the tree's set once armed,
// else a throwaway set (before arm every page is copied anyway).
func (m *VM) dirtyTarget() *fork.Set {
	if m.tree != nil {
		return m.tree.Dirty()
	}
	return fork.NewSet(len(m.mem) / PageSize)
}

// harvest moves the pages the guest dirtied since the last harvest into s
// and re-arms dirty tracking for them.
func (m *VM) harvest(s *fork.Set) error {
	if m.cfg.DirtyRing {
		return m.harvestRing(s)
	}
	if err := getDirtyLog(m.vmFD, 0, m.bitmap); err != nil {
		return err
	}
	if m.manualProtect {
		any := false
		for _, w := range m.bitmap {
			if w != 0 {
				any = true
				break
			}
		}
		if !any {
			return nil
		}
		if err := clearDirty(m.vmFD, 0, uint32(len(m.mem)/PageSize), m.bitmap); err != nil {
			return err
		}
	}
	s.AddBitmap(0, m.bitmap)
	return nil
}

func (m *VM) harvestRing(s *fork.Set) error {
	n := uint32(len(m.ring) / dirtyGFNSize)
	pages := uint64(len(m.mem) / PageSize)
	got := 0
	for ; ; m.ringNext++ {
		e := m.ring[(m.ringNext%n)*dirtyGFNSize:][:dirtyGFNSize]
		if binary.LittleEndian.Uint32(e)&dirtyGFNDirty == 0 {
			break
		}
		slot, off := binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint64(e[8:])
		if slot != 0 || off >= pages {
			return fmt.Errorf("kvm: dirty ring entry for slot %d page %d outside guest RAM", slot, off)
		}
		s.Add(int(off))
		binary.LittleEndian.PutUint32(e, dirtyGFNReset)
		got++
	}
	if got == 0 {
		return nil
	}
	if _, err := ioctlVal(m.vmFD, "KVM_RESET_DIRTY_RINGS", kvmResetDirtyRings, 0); err != nil {
		return err
	}
	if got == int(n) {
		// A kernel that honours the soft limit exits with at least its
		// reserved entries free; a completely full ring means pushes went
		// past it and dirty pages may have been overwritten (seen on PVM
		// hosts with small rings). Restoring from it would be unsound.
		return fmt.Errorf("%w: %d entries", ErrRingOverflow, n)
	}
	return nil
}

// CheckpointBytes is the host memory the VM's checkpoints hold: the fork
// shadow (counted whole) and the undo pages; 0 before the first checkpoint.
func (m *VM) CheckpointBytes() int64 {
	if m.tree == nil {
		return 0
	}
	return int64(len(m.shadow)) + int64(m.tree.UndoPages())*PageSize
}

// arm maps the shadow and takes the root copy of the populated parts of RAM.
func (m *VM) arm() error {
	start := time.Now()
	shadow, err := unix.Mmap(-1, 0, len(m.mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("kvm: mmap shadow RAM: %w", err)
	}
	tree, err := fork.NewTree(m.mem, shadow, PageSize)
	if err != nil {
		return errors.Join(err, unix.Munmap(shadow))
	}
	if err := m.harvest(tree.Dirty()); err != nil { // clears the log; Arm copies everything anyway
		return errors.Join(err, unix.Munmap(shadow))
	}
	ranges, err := m.populated()
	if err != nil {
		return errors.Join(err, unix.Munmap(shadow))
	}
	if err := tree.Arm(ranges); err != nil {
		return errors.Join(err, unix.Munmap(shadow))
	}
	m.shadow, m.tree = shadow, tree
	m.stats.Arm = time.Since(start)
	m.stats.ArmBytes = 0
	for _, r := range ranges {
		m.stats.ArmBytes += int64(r.Len)
	}
	return nil
}

// populated lists the RAM ranges the memfd holds pages for (SEEK_DATA /
// SEEK_HOLE); holes read as zero, like the fresh shadow.
func (m *VM) populated() ([]fork.Range, error) {
	var out []fork.Range
	size := int64(len(m.mem))
	for off := int64(0); off < size; {
		d, err := unix.Seek(m.mfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("kvm: guest RAM SEEK_DATA: %w", err)
		}
		h, err := unix.Seek(m.mfd, d, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("kvm: guest RAM SEEK_HOLE: %w", err)
		}
		lo, hi := d&^(PageSize-1), min((h+PageSize-1)&^(PageSize-1), size)
		out = append(out, fork.Range{Off: int(lo), Len: int(hi - lo)})
		off = hi
	}
	return out, nil
}

// Checkpoint saves the vCPU, VM and device state and pushes a memory delta
// of the pages dirtied since the previous checkpoint. The first checkpoint
// also takes the root copy of RAM (Stats.Arm).
func (m *VM) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, vmm.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := time.Now()
	if m.tree == nil {
		if err := m.arm(); err != nil {
			return 0, err
		}
	}
	if err := m.harvest(m.tree.Dirty()); err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	st := &checkpointState{scratch: m.scratch}
	if m.att != nil {
		st.devices = m.att.saveDevices()
	}
	var err error
	if st.vcpu, err = m.saveVCPU(); err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	if st.vm, err = m.saveVM(); err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	id, err := m.tree.Checkpoint()
	if err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	m.states[id] = st
	m.stats.Checkpoint = time.Since(start)
	return vmm.CheckpointID(id), nil
}

// Restore puts RAM back (only the pages dirtied since id), then the vCPU,
// VM and device state, and drops the checkpoints above id.
func (m *VM) Restore(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	st, ok := m.states[fork.ID(id)]
	if !ok {
		return fmt.Errorf("kvm: restore %d: %w", id, vmm.ErrUnknownCheckpoint)
	}
	if err := m.harvest(m.tree.Dirty()); err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	harvested := time.Now()
	copied, err := m.tree.Restore(fork.ID(id))
	if err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	restored := time.Now()
	for other := range m.states {
		if other > fork.ID(id) {
			delete(m.states, other)
		}
	}
	if err := m.loadVCPU(&st.vcpu); err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	if err := m.loadVM(&st.vm); err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	m.scratch = st.scratch
	if m.att != nil {
		if err := m.att.loadDevices(st.devices); err != nil {
			return fmt.Errorf("kvm: restore %d: %w", id, err)
		}
	}
	end := time.Now()
	m.stats.Restore = end.Sub(start)
	m.stats.RestoreHarvest, m.stats.RestoreCopy, m.stats.RestoreState = harvested.Sub(start), restored.Sub(harvested), end.Sub(restored)
	m.stats.RestorePages = copied
	return nil
}

// Delete removes a checkpoint from the path; the others stay restorable.
func (m *VM) Delete(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	if _, ok := m.states[fork.ID(id)]; !ok {
		return fmt.Errorf("kvm: delete %d: %w", id, vmm.ErrUnknownCheckpoint)
	}
	if err := m.tree.Delete(fork.ID(id)); err != nil {
		return fmt.Errorf("kvm: delete %d: %w", id, err)
	}
	delete(m.states, fork.ID(id))
	return nil
}

// Checkpoints lists the current path, oldest first.
func (m *VM) Checkpoints() []vmm.CheckpointID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tree == nil {
		return nil
	}
	var out []vmm.CheckpointID
	for _, id := range m.tree.Path() {
		out = append(out, vmm.CheckpointID(id))
	}
	return out
}

// RAMHash implements vmm.Hasher: blake3 of all guest RAM (fork.Hash).
func (m *VM) RAMHash(ctx context.Context) ([32]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return [32]byte{}, vmm.ErrClosed
	}
	return fork.Hash(m.mem), ctx.Err()
}

// Stats returns counters and the durations of the last operations.
func (m *VM) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// Timings implements vmm.Timings.
func (m *VM) Timings() vmm.TimingInfo {
	s := m.Stats()
	return vmm.TimingInfo{Checkpoint: s.Checkpoint, Restore: s.Restore, RestoreRAM: s.Restore, RestorePages: s.RestorePages}
}

// Close stops the vCPU thread and releases every fd and mapping. Idempotent.
func (m *VM) Close() error {
	// Pause until we hold the lock: a Run in progress returns.
	var errs []error
	for !m.mu.TryLock() {
		if err := m.Pause(); err != nil && !errors.Is(err, vmm.ErrClosed) {
			errs = append(errs, err)
		}
		time.Sleep(time.Millisecond)
	}
	defer m.mu.Unlock()
	if m.closed {
		return errors.Join(errs...)
	}
	m.closed = true
	if m.tid.Load() != 0 {
		close(m.runCh)
		<-m.threadDone
	}
	m.mapMu.Lock()
	for _, b := range []*[]byte{&m.run, &m.ring, &m.mem, &m.shadow} {
		if *b != nil {
			if err := unix.Munmap(*b); err != nil {
				errs = append(errs, fmt.Errorf("kvm: munmap: %w", err))
			}
			*b = nil
		}
	}
	m.mapMu.Unlock()
	for _, fd := range []*int{&m.vcpuFD, &m.vmFD, &m.mfd, &m.sysFD} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, fmt.Errorf("kvm: close fd %d: %w", *fd, err))
			}
			*fd = -1
		}
	}
	m.tree, m.states = nil, nil
	return errors.Join(errs...)
}

// gk calls one of gokvm's kvm/ wrappers (the thin ioctls it has; the rest
// are ours, in abi.go and ioctl_unsafe.go) and wraps its errno as ours.
// gokvm does not retry EINTR (the Go runtime's preemption signal can
// interrupt any ioctl); we do.
func gk(op string, f func() (uintptr, error)) (int, error) {
	for {
		r, err := f()
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &IoctlError{Op: op, Err: err}
		}
		return int(r), nil
	}
}
