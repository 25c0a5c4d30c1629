// Package x86asm is a tiny x86-64 assembler for synthetic guests, the
// programs vmm/kvm's tests and benchmarks load on a bare VM
// (kvm.VM.LoadProgram): general-purpose instructions, port I/O, memory
// accesses and the few system instructions a handler needs. It is pure
// and knows no VMM: a program ends by writing to whatever exit port its
// caller names (kvm.DebugExitPort). The production VMM holds no assembler
// (internal/arch).
package x86asm
