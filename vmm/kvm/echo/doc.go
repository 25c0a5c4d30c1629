// Package echo holds the echo guests: synthetic programs on a bare KVM
// machine (kvm.NewBare: the Linux machine's devices, no kernel) that wait
// for a message of a fixed size on the agent channel and send it back,
// the way Linux's drivers move it — over COM2 byte by byte, or over the
// agent console one buffer per message. Measure counts the exits and the
// time per round trip on any /dev/kvm, PVM included (`themisctl bench
// echo`, BenchmarkChannel); Start gives tests a running guest. The
// programs are assembled with vmm/kvm/x86asm; the production VMM holds
// neither (internal/arch).
package echo
