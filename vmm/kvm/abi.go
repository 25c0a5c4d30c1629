package kvm

// Mirrors of the x86-64 KVM ABI (linux/kvm.h, asm/kvm.h). Each struct says
// which kernel struct it mirrors; abi_test.go checks every size against the
// kernel's. Opaque kernel blobs (LAPIC registers, irqchip, PIT) are byte
// arrays: we save and restore them, we never interpret them.

const kvmio = 0xAE

func ioc(dir, nr, size uintptr) uintptr { return dir<<30 | size<<16 | kvmio<<8 | nr }

const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2
)

// ioctl numbers. The sizes are the kernel struct sizes (checked in abi_test.go).
var (
	kvmGetAPIVersion       = ioc(iocNone, 0x00, 0)
	kvmCreateVM            = ioc(iocNone, 0x01, 0)
	kvmGetMSRIndexList     = ioc(iocRead|iocWrite, 0x02, 4)
	kvmCheckExtension      = ioc(iocNone, 0x03, 0)
	kvmGetVCPUMmapSize     = ioc(iocNone, 0x04, 0)
	kvmGetSupportedCPUID   = ioc(iocRead|iocWrite, 0x05, 8)
	kvmCreateVCPU          = ioc(iocNone, 0x41, 0)
	kvmGetDirtyLog         = ioc(iocWrite, 0x42, 16)
	kvmSetUserMemoryRegion = ioc(iocWrite, 0x46, 32)
	kvmCreateIRQChip       = ioc(iocNone, 0x60, 0)
	kvmGetIRQChip          = ioc(iocRead|iocWrite, 0x62, 520)
	kvmSetIRQChip          = ioc(iocRead, 0x63, 520)
	kvmCreatePIT2          = ioc(iocWrite, 0x77, 64)
	kvmRun                 = ioc(iocNone, 0x80, 0)
	kvmGetRegs             = ioc(iocRead, 0x81, 144)
	kvmSetRegs             = ioc(iocWrite, 0x82, 144)
	kvmGetSregs            = ioc(iocRead, 0x83, 312)
	kvmSetSregs            = ioc(iocWrite, 0x84, 312)
	kvmGetMSRs             = ioc(iocRead|iocWrite, 0x88, 8)
	kvmSetMSRs             = ioc(iocWrite, 0x89, 8)
	kvmGetFPU              = ioc(iocRead, 0x8c, 416)
	kvmSetFPU              = ioc(iocWrite, 0x8d, 416)
	kvmGetLAPIC            = ioc(iocRead, 0x8e, 1024)
	kvmSetLAPIC            = ioc(iocWrite, 0x8f, 1024)
	kvmSetCPUID2           = ioc(iocWrite, 0x90, 8)
	kvmGetMPState          = ioc(iocRead, 0x98, 4)
	kvmSetMPState          = ioc(iocWrite, 0x99, 4)
	kvmGetPIT2             = ioc(iocRead, 0x9f, 112)
	kvmSetPIT2             = ioc(iocWrite, 0xa0, 112)
	kvmGetVCPUEvents       = ioc(iocRead, 0x9f, 64)
	kvmSetVCPUEvents       = ioc(iocWrite, 0xa0, 64)
	kvmGetDebugRegs        = ioc(iocRead, 0xa1, 128)
	kvmSetDebugRegs        = ioc(iocWrite, 0xa2, 128)
	kvmEnableCap           = ioc(iocWrite, 0xa3, 104)
	kvmGetXSAVE            = ioc(iocRead, 0xa4, 4096)
	kvmSetXSAVE            = ioc(iocWrite, 0xa5, 4096)
	kvmGetXCRS             = ioc(iocRead, 0xa6, 392)
	kvmSetXCRS             = ioc(iocWrite, 0xa7, 392)
	kvmSetClock            = ioc(iocWrite, 0x7b, 48)
	kvmGetClock            = ioc(iocRead, 0x7c, 48)
	kvmClearDirtyLog       = ioc(iocRead|iocWrite, 0xc0, 24)
	kvmResetDirtyRings     = ioc(iocNone, 0xc7, 0)
)

// Capabilities (KVM_CAP_*).
const (
	capIRQChip             = 0
	capUserMemory          = 3
	capPIT2                = 33
	capAdjustClock         = 39
	capVCPUEvents          = 41
	capDebugRegs           = 50
	capXSAVE               = 55
	capXCRS                = 56
	capImmediateExit       = 136
	capManualDirtyLogProt2 = 168
	capDirtyLogRing        = 192
	dirtyLogManualProtect  = 1 // KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE
	memLogDirtyPages       = 1 // KVM_MEM_LOG_DIRTY_PAGES
	dirtyLogPageOffset     = 64
	dirtyGFNDirty          = 1 // KVM_DIRTY_GFN_F_DIRTY
	dirtyGFNReset          = 2 // KVM_DIRTY_GFN_F_RESET
	dirtyGFNSize           = 16
	irqchipPICMaster       = 0
	irqchipPICSlave        = 1
	irqchipIOAPIC          = 2
	kvmAPIVersion          = 12
	vcpuEventsValidNMI     = 1
	vcpuEventsValidSIPI    = 2
	vcpuEventsValidShadow  = 4
)

// Exit reasons (KVM_EXIT_*).
const (
	exitUnknown       = 0
	exitException     = 1
	exitIO            = 2
	exitHypercall     = 3
	exitDebug         = 4
	exitHLT           = 5
	exitMMIO          = 6
	exitIRQWindowOpen = 7
	exitShutdown      = 8
	exitFailEntry     = 9
	exitIntr          = 10
	exitNMI           = 16
	exitInternalError = 17
	exitSystemEvent   = 24
	exitDirtyRingFull = 31
)

var exitNames = map[uint32]string{
	exitUnknown: "UNKNOWN", exitException: "EXCEPTION", exitIO: "IO", exitHypercall: "HYPERCALL",
	exitDebug: "DEBUG", exitHLT: "HLT", exitMMIO: "MMIO", exitIRQWindowOpen: "IRQ_WINDOW_OPEN",
	exitShutdown: "SHUTDOWN", exitFailEntry: "FAIL_ENTRY", exitIntr: "INTR", exitNMI: "NMI",
	exitInternalError: "INTERNAL_ERROR", exitSystemEvent: "SYSTEM_EVENT", exitDirtyRingFull: "DIRTY_RING_FULL",
}

// kvm_run field offsets.
const (
	runImmediateExit = 1
	runExitReason    = 8
	runExit          = 32 // the exit union
)

// Offsets in kvm_run's exit union for KVM_EXIT_IO (mirrors its io member).
const (
	ioExitDirection  = 0 // u8: 1 = OUT
	ioExitSize       = 1 // u8: 1, 2 or 4 bytes per access
	ioExitPort       = 2 // u16
	ioExitCount      = 4 // u32: accesses (string I/O)
	ioExitDataOffset = 8 // u64: offset of the data in kvm_run
)

// Offsets in kvm_run's exit union for KVM_EXIT_MMIO (mirrors its mmio member).
const (
	mmioExitPhysAddr = 0  // u64
	mmioExitData     = 8  // u8[8]
	mmioExitLen      = 16 // u32
	mmioExitIsWrite  = 20 // u8
)

// Regs mirrors struct kvm_regs.
type Regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

// Segment mirrors struct kvm_segment.
type Segment struct {
	Base                           uint64
	Limit                          uint32
	Selector                       uint16
	Type                           uint8
	Present, DPL, DB, S, L, G, AVL uint8
	Unusable                       uint8
	_                              uint8
}

// DTable mirrors struct kvm_dtable.
type DTable struct {
	Base  uint64
	Limit uint16
	_     [3]uint16
}

// Sregs mirrors struct kvm_sregs.
type Sregs struct {
	CS, DS, ES, FS, GS, SS  Segment
	TR, LDT                 Segment
	GDT, IDT                DTable
	CR0, CR2, CR3, CR4, CR8 uint64
	EFER                    uint64
	APICBase                uint64
	InterruptBitmap         [4]uint64
}

// FPU mirrors struct kvm_fpu.
type FPU struct {
	FPR        [8][16]uint8
	FCW, FSW   uint16
	FTWX       uint8
	_          uint8
	LastOpcode uint16
	LastIP     uint64
	LastDP     uint64
	XMM        [16][16]uint8
	MXCSR      uint32
	_          uint32
}

// XSAVE mirrors struct kvm_xsave (the 4096-byte region of KVM_GET_XSAVE;
// KVM_GET_XSAVE2's larger buffers, for AMX, are not used). Bytes 160..415
// are XMM0-15, 512..575 the XSAVE header (XSTATE_BV first), 576..831 the
// upper halves of YMM0-15.
type XSAVE struct {
	Region [1024]uint32
}

// LAPIC mirrors struct kvm_lapic_state.
type LAPIC struct {
	Regs [1024]byte
}

// IRQChip mirrors struct kvm_irqchip.
type IRQChip struct {
	ChipID uint32
	_      uint32
	Chip   [512]byte
}

// PITState2 mirrors struct kvm_pit_state2 (three 24-byte channel states,
// flags, reserved).
type PITState2 struct {
	Channels [3][24]byte
	Flags    uint32
	_        [9]uint32
}

// VCPUEvents mirrors struct kvm_vcpu_events (pending exception, interrupt,
// NMI, SIPI, SMM and the flags saying which fields are valid).
type VCPUEvents struct {
	Raw [64]byte
}

// DebugRegs mirrors struct kvm_debugregs.
type DebugRegs struct {
	DB    [4]uint64
	DR6   uint64
	DR7   uint64
	Flags uint64
	_     [9]uint64
}

// MPState mirrors struct kvm_mp_state.
type MPState struct {
	State uint32
}

// XCRS mirrors struct kvm_xcrs.
type XCRS struct {
	N     uint32
	Flags uint32
	XCRs  [16]struct {
		XCR   uint32
		_     uint32
		Value uint64
	}
	_ [16]uint64
}

// ClockData mirrors struct kvm_clock_data (the kvmclock of the VM).
type ClockData struct {
	Clock    uint64
	Flags    uint32
	_        uint32
	Realtime uint64
	HostTSC  uint64
	_        [4]uint32
}

// MSR mirrors struct kvm_msr_entry.
type MSR struct {
	Index uint32
	_     uint32
	Data  uint64
}

const maxMSRs = 64

// msrs mirrors struct kvm_msrs with a fixed-size entries array.
type msrs struct {
	N       uint32
	_       uint32
	Entries [maxMSRs]MSR
}

// msrList mirrors struct kvm_msr_list with a fixed-size array.
type msrList struct {
	N       uint32
	Indices [1024]uint32
}

// cpuidEntry2 mirrors struct kvm_cpuid_entry2.
type cpuidEntry2 struct {
	Function, Index, Flags uint32
	EAX, EBX, ECX, EDX     uint32
	_                      [3]uint32
}

const maxCPUID = 256

// cpuid2 mirrors struct kvm_cpuid2 with a fixed-size entries array.
type cpuid2 struct {
	N       uint32
	_       uint32
	Entries [maxCPUID]cpuidEntry2
}

// userspaceMemoryRegion mirrors struct kvm_userspace_memory_region.
type userspaceMemoryRegion struct {
	Slot, Flags   uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

// dirtyLog mirrors struct kvm_dirty_log.
type dirtyLog struct {
	Slot   uint32
	_      uint32
	Bitmap uint64 // userspace address of the bitmap
}

// clearDirtyLog mirrors struct kvm_clear_dirty_log.
type clearDirtyLog struct {
	Slot      uint32
	NumPages  uint32
	FirstPage uint64
	Bitmap    uint64
}

// enableCap mirrors struct kvm_enable_cap.
type enableCap struct {
	Cap   uint32
	Flags uint32
	Args  [4]uint64
	_     [64]uint8
}

// pitSpeakerDummy is KVM_PIT_SPEAKER_DUMMY: the in-kernel PIT also decodes
// port 0x61 (speaker data and the channel 2 gate, channel 2's output).
const pitSpeakerDummy = 1

// pitConfig mirrors struct kvm_pit_config.
type pitConfig struct {
	Flags uint32
	_     [15]uint32
}

// MSR indices saved with every checkpoint, TSC near the end (as nyx-lite and
// QEMU do: writing the TSC late keeps it from moving while the others are
// set), then the TSC deadline, which KVM arms against the TSC just written
// (not saving it left the guest's next timer at the deadline the discarded
// branch had programmed). Those the host does not list in
// KVM_GET_MSR_INDEX_LIST are left out.
var checkpointMSRs = []uint32{
	0x174,      // IA32_SYSENTER_CS
	0x175,      // IA32_SYSENTER_ESP
	0x176,      // IA32_SYSENTER_EIP
	0x277,      // IA32_PAT
	0xc0000081, // STAR
	0xc0000082, // LSTAR
	0xc0000083, // CSTAR
	0xc0000084, // SFMASK
	0xc0000100, // FS_BASE
	0xc0000101, // GS_BASE
	0xc0000102, // KERNEL_GS_BASE
	0xc0000103, // TSC_AUX
	0x10,       // IA32_TSC
	0x6e0,      // IA32_TSC_DEADLINE: after the TSC
}
