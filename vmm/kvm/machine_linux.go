package kvm

import (
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
