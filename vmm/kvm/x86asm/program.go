package x86asm

import "encoding/binary"

// pageSize is the x86 page DirtyProgram steps by.
const pageSize = 4096

// DirtyProgram is a synthetic-guest program that writes the qword
// 0x5a5a5a5a at the start of each of pages consecutive pages from guest
// address addr, then writes code to exitPort (kvm.DebugExitPort ends
// kvm.VM.Run with ExitDebug and Code = code). With pages < 1 the program
// only exits.
//
// The pages must lie inside guest RAM and clear of the code, stack and
// page tables (kvm.DataAddr on). Benchmarks use it to dirty an exact
// number of pages between a checkpoint and a restore.
//
// The code is general-purpose instructions and one port write only (PVM
// hosts cannot run SSE in a synthetic guest): mov rdi, addr; mov rcx,
// pages; mov rax, 0x5a5a5a5a; loop: mov [rdi], rax; add rdi, 4096; dec
// rcx; jnz loop; then mov edx, exitPort; mov eax, code; out dx, eax.
func DirtyProgram(exitPort uint16, addr uint64, pages int, code uint32) []byte {
	var a Asm
	if pages > 0 {
		a.DirtyPages(addr, pages)
	}
	return a.Out(exitPort, code).Bytes()
}

// dirtyLoop is the page-dirtying loop of DirtyPages.
func dirtyLoop(addr uint64, pages int) []byte {
	le := binary.LittleEndian
	b := le.AppendUint64([]byte{0x48, 0xbf}, addr)            // mov rdi, imm64
	b = le.AppendUint64(append(b, 0x48, 0xb9), uint64(pages)) // mov rcx, imm64
	b = le.AppendUint64(append(b, 0x48, 0xb8), 0x5a5a5a5a)    // mov rax, imm64
	loop := len(b)
	b = append(b, 0x48, 0x89, 0x07)                            // mov [rdi], rax
	b = le.AppendUint32(append(b, 0x48, 0x81, 0xc7), pageSize) // add rdi, imm32
	b = append(b, 0x48, 0xff, 0xc9)                            // dec rcx
	b = append(b, 0x0f, 0x85)                                  // jnz rel32
	return le.AppendUint32(b, uint32(int32(loop-(len(b)+4))))
}
