// Package cpbench is test support both VMM backends' benchmarks share:
// the timed checkpoint loop (Checkpoint), over a vmm.Machine or the KVM
// backend's bare kvm.VM. It imports no backend, so either backend's own
// tests may use it (vmm/vmmtest boots through launch, which imports both).
package cpbench
