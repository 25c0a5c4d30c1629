// Package kvm is the Go VMM on /dev/kvm: one VM with one vCPU whose guest
// RAM we map, run and checkpoint ourselves, reverting a branch in time
// proportional to the pages it dirtied (package fork holds the page-delta
// logic).
//
// Two types, one inside the other:
//
//   - VM (NewVM, VMConfig) is the mechanism layer, tested on PVM hosts with
//     synthetic guests: guest RAM as a memfd mapped MAP_SHARED|MAP_NORESERVE,
//     one memslot with KVM_MEM_LOG_DIRTY_PAGES, dirty tracking by bitmap
//     (KVM_GET_DIRTY_LOG, with KVM_CLEAR_DIRTY_LOG when the host offers
//     manual protect) or by the per-vCPU dirty ring; an in-kernel irqchip and
//     PIT; a synthetic-guest loader that enters 64-bit long mode directly
//     through KVM_SET_SREGS (identity map of 0-4 GiB with 2 MiB pages, flat
//     GDT, code at CodeAddr); our own run loop with an explicit KVM_RUN errno
//     switch; port I/O devices (the scratch register, the debug exit);
//     checkpoints that save regs, sregs, FPU, XSAVE, XCRs, MSRs (TSC, then
//     its deadline), LAPIC, vCPU events, debug registers, MP state, irqchip,
//     PIT, KVM clock and the attached devices' state (each device its own
//     section, registered as it is made: devstate_linux.go).
//     Its files by concern: machine_linux.go (the types, setup, Close),
//     ram_linux.go (guest RAM and the program loader), run_linux.go (the
//     run loop and its exits), dirty_linux.go (the dirty log's harvest),
//     vmcheckpoint_linux.go (checkpoint, restore, RAM hash), state_linux.go
//     (the vCPU and VM state they save).
//   - Machine (Start) implements vmm.Machine: a Linux guest (bzImage through
//     linuxboot) on a VM, with the 16550 UARTs (console; the agent
//     channel's fallback), the CMOS RTC, PCI, one virtio-blk per disk and
//     the agent console, a virtio console whose port "themis.agent" is the
//     agent channel once the guest opens it (package devices), served on
//     the VM's port I/O exits through a table of port ranges (ports.go). Its
//     checkpoints go through the path both backends share (package
//     vmm/checkpoint): the VM's checkpoint is the memory part, the path owns
//     the disks' overlays, the lockstep assertion and the verify gate. It
//     needs hardware virtualization (see docs/kvm.md).
//
// A bare machine (bare_linux.go, NewBare): the Linux machine's devices on
// a VM with no kernel, for synthetic guests that drive them — the echo
// guests of package vmm/kvm/echo measure the agent channel on one. The
// synthetic programs, the echo guests' and every test's, are assembled
// with package vmm/kvm/x86asm; this package holds no assembler.
//
// Threads: KVM_RUN always runs on one goroutine locked to its OS thread
// (KVM pays a synchronize_rcu whenever a vCPU changes thread). Pause sets
// kvm_run.immediate_exit and sends SIGURG to that thread with tgkill: the Go
// runtime ignores a SIGURG it did not ask for, and KVM_RUN returns EINTR,
// which the run loop reads as "pause requested" (or, without a request, as
// the Go runtime's own preemption signal, and re-enters).
//
// Concurrency: a VM's methods are serialized by one mutex; only Pause
// (and Close, which pauses) may be called while Run is in progress. A
// Machine's methods are serialized by its own mutex (Close first closes
// the agent channel, so that a call waiting on a guest that never answers
// returns and Close gets the mutex); its vCPU runs on a runner goroutine
// between checkpoints, and port I/O is served there.
//
// Platform notes (measured on the PVM hosts): a synthetic guest cannot run
// SSE (test XMM/AVX state from the host side); INT3 with no IDT ends in an
// emulation failure rather than a triple fault; the dirty ring overflows
// before KVM_EXIT_DIRTY_RING_FULL, so on hosts without vmx/svm a full ring
// is reported as ErrRingOverflow instead of being trusted.
//
// unsafe is confined to ioctl_unsafe.go. This package may import vmm,
// vmm/checkpoint and fork, never a sibling backend.
package kvm
