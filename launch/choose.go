package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm"
)

// Backend names, as asked (Auto, QEMU, KVM) and as chosen (QEMU, KVM, None).
const (
	Auto = "auto"
	QEMU = vmm.BackendQEMU
	KVM  = vmm.BackendKVM
	// None is auto's choice on a host with neither: Boot refuses it.
	None = "none"
)

// KVMKind is what this host's /dev/kvm is.
type KVMKind string

// KVM kinds.
const (
	// KVMHardware is /dev/kvm on vmx or svm: a stock Linux kernel boots on it.
	KVMHardware KVMKind = "hardware"
	// KVMPVM is a /dev/kvm without vmx or svm (kvm_pvm or similar): only
	// synthetic low-address guests run on it.
	KVMPVM KVMKind = "pvm"
	// KVMAbsent is no usable /dev/kvm.
	KVMAbsent KVMKind = "absent"
)

// qemuBinary is the QEMU system emulator the qemu backend runs.
const qemuBinary = "qemu-system-x86_64"

// Host is what this host offers the backends.
type Host struct {
	// KVM is what /dev/kvm is, and KVMWhy the evidence, in words.
	KVM    KVMKind
	KVMWhy string
	// QEMU is the path of qemu-system-x86_64 ("" where it is not installed).
	QEMU string
}

// Probe reads what this host offers: it opens /dev/kvm, reads the CPU
// flags and looks for QEMU on $PATH. It starts nothing.
func Probe() Host {
	h := Host{}
	h.KVM, h.KVMWhy = probeKVM()
	if p, err := exec.LookPath(qemuBinary); err == nil {
		h.QEMU = p
	}
	return h
}

// probeKVM tells whether /dev/kvm is hardware virtualization.
func probeKVM() (KVMKind, string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return KVMAbsent, "no /dev/kvm: this host offers no hardware virtualization (nor PVM) to its guests"
	}
	if err != nil {
		return KVMAbsent, fmt.Sprintf("/dev/kvm: %v", err)
	}
	if err := f.Close(); err != nil {
		return KVMAbsent, fmt.Sprintf("/dev/kvm: %v", err)
	}
	if hw, why := kvm.HardwareVirtualization(); hw {
		return KVMHardware, "/dev/kvm opens and the " + why
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return KVMPVM, "/dev/kvm is kvm_pvm (pagetable-based, no vmx/svm): a stock Linux kernel cannot boot through it; synthetic low-address guests can (vmm/kvm)"
	}
	return KVMPVM, "/dev/kvm opens but the CPU shows neither vmx nor svm: not hardware virtualization"
}

// Choice is the backend a guest boots on and why.
type Choice struct {
	// Backend is KVM, QEMU or None (auto on a host with neither).
	Backend string
	// Why says, in words, what made the choice.
	Why string
	// Fallback is set where auto picked KVM: Boot falls back to QEMU when
	// the KVM boot fails.
	Fallback bool
}

// Choose is the backend rule: from what the host offers and what was asked
// ("" or "auto", "qemu", "kvm") it returns the backend and why. "qemu" is
// taken as asked (QEMU's own start says if it is missing); "kvm" needs
// hardware virtualization; auto is decideAuto. Anything else, and kvm
// without hardware virtualization, is an errkind.FieldError naming
// "backend".
func Choose(h Host, asked string) (Choice, error) {
	switch asked {
	case "", Auto:
		return decideAuto(h), nil
	case QEMU:
		return Choice{Backend: QEMU, Why: "asked for qemu"}, nil
	case KVM:
		if h.KVM != KVMHardware {
			return Choice{}, errkind.Invalid("backend", "%q: Linux cannot boot on this host's /dev/kvm: %s; use qemu or auto", asked, h.KVMWhy)
		}
		return Choice{Backend: KVM, Why: "asked for kvm"}, nil
	default:
		return Choice{}, errkind.Invalid("backend", "%q: want %s, %s or %s", asked, Auto, QEMU, KVM)
	}
}

// decideAuto is the "auto" rule: the Go KVM backend where /dev/kvm is
// hardware virtualization (it needs no QEMU, and falls back to QEMU if its
// boot fails); otherwise QEMU with TCG; otherwise None.
func decideAuto(h Host) Choice {
	switch {
	case h.KVM == KVMHardware:
		return Choice{Backend: KVM, Fallback: true, Why: "/dev/kvm is hardware virtualization: the Go KVM backend (vmm/kvm), restores in time proportional to the pages dirtied (sessions fall back to QEMU if its boot fails)"}
	case h.KVM == KVMPVM && h.QEMU != "":
		return Choice{Backend: QEMU, Why: "/dev/kvm is not hardware virtualization, so Linux cannot boot on it: QEMU with TCG"}
	case h.QEMU != "":
		return Choice{Backend: QEMU, Why: "no /dev/kvm: QEMU with TCG"}
	default:
		return Choice{Backend: None, Why: "no usable backend: install qemu-system-x86 (apt-get install qemu-system-x86 qemu-utils)"}
	}
}
