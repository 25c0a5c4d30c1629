package kvm

import "encoding/binary"

// asm is a tiny x86-64 assembler for synthetic guests (tests, and the
// echo guests of MeasureEcho): general-purpose instructions, port I/O and
// memory accesses only (a synthetic guest cannot run SSE on PVM hosts).
type asm struct{ b []byte }

func (a *asm) emit(b ...byte) *asm { a.b = append(a.b, b...); return a }

func (a *asm) imm32(v uint32) *asm { return a.emit(binary.LittleEndian.AppendUint32(nil, v)...) }

func (a *asm) imm64(v uint64) *asm { return a.emit(binary.LittleEndian.AppendUint64(nil, v)...) }

// Register numbers.
const (
	rax = iota
	rcx
	rdx
	rbx
	rsp
	rbp
	rsi
	rdi
	r8
	r9
	r10
	r11
	r12
	r13
	r14
	r15
)

// movImm: mov reg, imm64.
func (a *asm) movImm(reg int, v uint64) *asm {
	rex := byte(0x48)
	if reg >= 8 {
		rex |= 1
	}
	return a.emit(rex, 0xb8+byte(reg&7)).imm64(v)
}

// storeRAXAtRDI: mov [rdi], rax.
func (a *asm) storeRAXAtRDI() *asm { return a.emit(0x48, 0x89, 0x07) }

// decRCX: dec rcx.
func (a *asm) decRCX() *asm { return a.emit(0x48, 0xff, 0xc9) }

// jnzTo: jnz to an absolute offset in the program (rel32).
func (a *asm) jnzTo(target int) *asm {
	a.emit(0x0f, 0x85)
	return a.imm32(uint32(int32(target - (len(a.b) + 4))))
}

// outDX: mov edx, port; mov eax, v; out dx, eax.
func (a *asm) out(port uint16, v uint32) *asm {
	return a.emit(0xba).imm32(uint32(port)).emit(0xb8).imm32(v).emit(0xef)
}

// in: mov edx, port; in eax, dx.
func (a *asm) in(port uint16) *asm { return a.emit(0xba).imm32(uint32(port)).emit(0xed) }

// outEAX: mov edx, port; out dx, eax (eax as it is).
func (a *asm) outEAX(port uint16) *asm { return a.emit(0xba).imm32(uint32(port)).emit(0xef) }

// movSeg: mov ax, sel; mov es/ds/fs/gs, ax.
func (a *asm) loadDataSegs(sel uint16) *asm {
	a.emit(0x66, 0xb8, byte(sel), byte(sel>>8))
	return a.emit(0x8e, 0xc0 /*es*/, 0x8e, 0xd8 /*ds*/, 0x8e, 0xe0 /*fs*/, 0x8e, 0xe8 /*gs*/)
}

// wrmsr: mov ecx, idx; mov eax, lo; mov edx, hi; wrmsr.
func (a *asm) wrmsr(idx uint32, v uint64) *asm {
	return a.emit(0xb9).imm32(idx).emit(0xb8).imm32(uint32(v)).emit(0xba).imm32(uint32(v>>32)).emit(0x0f, 0x30)
}

func (a *asm) hlt() *asm             { return a.emit(0xf4) }
func (a *asm) spin() *asm            { return a.emit(0xeb, 0xfe) } // jmp $
func (a *asm) int3() *asm            { return a.emit(0xcc) }
func (a *asm) done(code uint32) *asm { return a.out(DebugExitPort, code) }

// dirtyPages writes one qword into each of n consecutive pages from addr.
func (a *asm) dirtyPages(addr uint64, n int) *asm { return a.emit(dirtyLoop(addr, n)...) }

// outb: mov edx, port; mov eax, v; out dx, al.
func (a *asm) outb(port uint16, v uint8) *asm {
	return a.emit(0xba).imm32(uint32(port)).emit(0xb8).imm32(uint32(v)).emit(0xee)
}

// outw: mov edx, port; mov eax, v; out dx, ax.
func (a *asm) outw(port uint16, v uint16) *asm {
	return a.emit(0xba).imm32(uint32(port)).emit(0xb8).imm32(uint32(v)).emit(0x66, 0xef)
}

// readSerial reads n bytes from the UART at base into [rdi..] (polling
// LSR.DR), leaving rdi past them.
func (a *asm) readSerial(base uint16, addr uint64, n int) *asm {
	a.movImm(rdi, addr).movImm(rcx, uint64(n))
	loop := len(a.b)
	a.emit(0xba).imm32(uint32(base + 5)) // mov edx, LSR
	poll := len(a.b)
	a.emit(0xec, 0xa8, 0x01)                    // in al, dx; test al, 1
	a.emit(0x74, byte(int8(poll-(len(a.b)+2)))) // jz poll
	a.emit(0xba).imm32(uint32(base))            // mov edx, RBR
	a.emit(0xec, 0x88, 0x07, 0x48, 0xff, 0xc7)  // in al, dx; mov [rdi], al; inc rdi
	return a.decRCX().jnzTo(loop)
}

// cliHLT: cli; hlt — with the in-kernel irqchip the vCPU then waits in the
// kernel until paused.
func (a *asm) cliHLT() *asm { return a.emit(0xfa, 0xf4) }

// Condition codes for jcc (the low nibble of 0x0f 0x8x).
const (
	ccB  = 0x2 // below (CF)
	ccZ  = 0x4 // zero
	ccNZ = 0x5 // not zero
)

// label is the current offset, a jump target.
func (a *asm) label() int { return len(a.b) }

// jcc: a conditional jump (rel32) to an offset already emitted.
func (a *asm) jcc(cc byte, target int) *asm {
	a.emit(0x0f, 0x80|cc)
	return a.imm32(uint32(int32(target - (len(a.b) + 4))))
}

// jccFwd emits a conditional jump (rel32) to be patched by land; it
// returns the jump's offset.
func (a *asm) jccFwd(cc byte) int {
	a.emit(0x0f, 0x80|cc).imm32(0)
	return len(a.b)
}

// jmpFwd emits a jmp (rel32) to be patched by land; it returns the jump's
// offset.
func (a *asm) jmpFwd() int {
	a.emit(0xe9).imm32(0)
	return len(a.b)
}

// land points the forward jump jccFwd or jmpFwd returned at the current
// offset.
func (a *asm) land(j int) *asm {
	binary.LittleEndian.PutUint32(a.b[j-4:], uint32(int32(len(a.b)-j)))
	return a
}

// jmp: jmp rel32 to an offset already emitted.
func (a *asm) jmp(target int) *asm {
	a.emit(0xe9)
	return a.imm32(uint32(int32(target - (len(a.b) + 4))))
}

func (a *asm) sti() *asm   { return a.emit(0xfb) }
func (a *asm) cli() *asm   { return a.emit(0xfa) }
func (a *asm) iretq() *asm { return a.emit(0x48, 0xcf) }

// inb: mov edx, port; in al, dx.
func (a *asm) inb(port uint16) *asm { return a.emit(0xba).imm32(uint32(port)).emit(0xec) }

// outbAL: mov edx, port; out dx, al (al as it is).
func (a *asm) outbAL(port uint16) *asm { return a.emit(0xba).imm32(uint32(port)).emit(0xee) }

// testAL: test al, imm8.
func (a *asm) testAL(v uint8) *asm { return a.emit(0xa8, v) }

// storeALAtRDI: mov [rdi], al; inc rdi.
func (a *asm) storeALAtRDI() *asm { return a.emit(0x88, 0x07, 0x48, 0xff, 0xc7) }

// loadALFromRSI: mov al, [rsi]; inc rsi.
func (a *asm) loadALFromRSI() *asm { return a.emit(0x8a, 0x06, 0x48, 0xff, 0xc6) }

// decR8: dec r8.
func (a *asm) decR8() *asm { return a.emit(0x49, 0xff, 0xc8) }

// loadWordRBX: movzx eax, word [rbx].
func (a *asm) loadWordRBX() *asm { return a.emit(0x0f, 0xb7, 0x03) }

// subEAXR12: sub eax, r12d.
func (a *asm) subEAXR12() *asm { return a.emit(0x44, 0x29, 0xe0) }

// andEAX: and eax, imm32.
func (a *asm) andEAX(v uint32) *asm { return a.emit(0x25).imm32(v) }

// cmpEAX: cmp eax, imm32.
func (a *asm) cmpEAX(v uint32) *asm { return a.emit(0x3d).imm32(v) }

// addR32: add r12d/r13d/r14d/r15d, imm32.
func (a *asm) addR32(reg int, v uint32) *asm {
	return a.emit(0x41, 0x81, 0xc0|byte(reg&7)).imm32(v)
}

// incR32: inc r12d/r13d/r14d/r15d.
func (a *asm) incR32(reg int) *asm { return a.emit(0x41, 0xff, 0xc0|byte(reg&7)) }

// storeWordAtRBX: mov word [rbx], r12w/r13w/r14w/r15w.
func (a *asm) storeWordAtRBX(reg int) *asm { return a.emit(0x66, 0x44, 0x89, 0x03|byte(reg&7)<<3) }

// testByteRBX: test byte [rbx], imm8.
func (a *asm) testByteRBX(v uint8) *asm { return a.emit(0xf6, 0x03, v) }
