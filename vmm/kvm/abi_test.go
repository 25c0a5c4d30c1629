package kvm

import (
	"encoding/binary"
	"reflect"
	"testing"
)

// TestABISizes checks every mirror against the kernel struct size, both as
// Go lays it out (what the ioctl sees) and as encoding/binary writes it
// (what a snapshot file holds): no hidden padding.
func TestABISizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		want int
	}{
		{"kvm_regs", Regs{}, 144},
		{"kvm_segment", Segment{}, 24},
		{"kvm_dtable", DTable{}, 16},
		{"kvm_sregs", Sregs{}, 312},
		{"kvm_fpu", FPU{}, 416},
		{"kvm_xsave", XSAVE{}, 4096},
		{"kvm_lapic_state", LAPIC{}, 1024},
		{"kvm_irqchip", IRQChip{}, 520},
		{"kvm_pit_state2", PITState2{}, 112},
		{"kvm_vcpu_events", VCPUEvents{}, 64},
		{"kvm_debugregs", DebugRegs{}, 128},
		{"kvm_mp_state", MPState{}, 4},
		{"kvm_xcrs", XCRS{}, 392},
		{"kvm_clock_data", ClockData{}, 48},
		{"kvm_msr_entry", MSR{}, 16},
		{"kvm_msrs", msrs{}, 8 + 16*maxMSRs},
		{"kvm_msr_list", msrList{}, 4 + 4*1024},
		{"kvm_cpuid_entry2", cpuidEntry2{}, 40},
		{"kvm_cpuid2", cpuid2{}, 8 + 40*maxCPUID},
		{"kvm_userspace_memory_region", userspaceMemoryRegion{}, 32},
		{"kvm_dirty_log", dirtyLog{}, 16},
		{"kvm_clear_dirty_log", clearDirtyLog{}, 24},
		{"kvm_enable_cap", enableCap{}, 104},
		{"kvm_pit_config", pitConfig{}, 64},
	}
	for _, tc := range tests {
		if got := int(reflect.TypeOf(tc.v).Size()); got != tc.want {
			t.Errorf("%s: Go size %d, kernel size %d", tc.name, got, tc.want)
		}
		if got := binary.Size(tc.v); got != tc.want {
			t.Errorf("%s: encoded size %d, kernel size %d", tc.name, got, tc.want)
		}
	}
}

func TestIoctlNumbers(t *testing.T) {
	t.Parallel()
	// Values from the kernel headers (x86-64).
	tests := []struct {
		name      string
		got, want uintptr
	}{
		{"KVM_RUN", kvmRun, 0xae80},
		{"KVM_GET_REGS", kvmGetRegs, 0x8090ae81},
		{"KVM_SET_SREGS", kvmSetSregs, 0x4138ae84},
		{"KVM_GET_XSAVE", kvmGetXSAVE, 0x9000aea4},
		{"KVM_SET_USER_MEMORY_REGION", kvmSetUserMemoryRegion, 0x4020ae46},
		{"KVM_GET_DIRTY_LOG", kvmGetDirtyLog, 0x4010ae42},
		{"KVM_ENABLE_CAP", kvmEnableCap, 0x4068aea3},
		{"KVM_GET_IRQCHIP", kvmGetIRQChip, 0xc208ae62},
		{"KVM_GET_PIT2", kvmGetPIT2, 0x8070ae9f},
		{"KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents, 0x8040ae9f},
		{"KVM_CLEAR_DIRTY_LOG", kvmClearDirtyLog, 0xc018aec0},
		{"KVM_RESET_DIRTY_RINGS", kvmResetDirtyRings, 0xaec7},
		{"KVM_GET_SUPPORTED_CPUID", kvmGetSupportedCPUID, 0xc008ae05},
		{"KVM_SET_CPUID2", kvmSetCPUID2, 0x4008ae90},
		{"KVM_GET_MSRS", kvmGetMSRs, 0xc008ae88},
		{"KVM_GET_LAPIC", kvmGetLAPIC, 0x8400ae8e},
		{"KVM_GET_XCRS", kvmGetXCRS, 0x8188aea6},
		{"KVM_GET_CLOCK", kvmGetClock, 0x8030ae7c},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
}
