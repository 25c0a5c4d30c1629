package x86asm

import "encoding/binary"

// Asm is a tiny x86-64 assembler for synthetic guests: general-purpose
// instructions, port I/O and memory accesses only (a synthetic guest
// cannot run SSE on PVM hosts). Its zero value is an empty program; every
// method appends and returns the assembler, so programs chain.
type Asm struct{ b []byte }

// Bytes is the program so far (the assembler's own buffer).
func (a *Asm) Bytes() []byte { return a.b }

// Emit appends raw bytes.
func (a *Asm) Emit(b ...byte) *Asm { a.b = append(a.b, b...); return a }

// Imm32 appends v little-endian.
func (a *Asm) Imm32(v uint32) *Asm { return a.Emit(binary.LittleEndian.AppendUint32(nil, v)...) }

// Imm64 appends v little-endian.
func (a *Asm) Imm64(v uint64) *Asm { return a.Emit(binary.LittleEndian.AppendUint64(nil, v)...) }

// Register numbers, as MovImm and the r12..r15 forms take them.
const (
	RAX = iota
	RCX
	RDX
	RBX
	RSP
	RBP
	RSI
	RDI
	R8
	R9
	R10
	R11
	R12
	R13
	R14
	R15
)

// MovImm: mov reg, imm64.
func (a *Asm) MovImm(reg int, v uint64) *Asm {
	rex := byte(0x48)
	if reg >= 8 {
		rex |= 1
	}
	return a.Emit(rex, 0xb8+byte(reg&7)).Imm64(v)
}

// StoreRAXAtRDI: mov [rdi], rax.
func (a *Asm) StoreRAXAtRDI() *Asm { return a.Emit(0x48, 0x89, 0x07) }

// DecRCX: dec rcx.
func (a *Asm) DecRCX() *Asm { return a.Emit(0x48, 0xff, 0xc9) }

// JnzTo: jnz to an absolute offset in the program (rel32).
func (a *Asm) JnzTo(target int) *Asm {
	a.Emit(0x0f, 0x85)
	return a.Imm32(uint32(int32(target - (len(a.b) + 4))))
}

// Out: mov edx, port; mov eax, v; out dx, eax.
func (a *Asm) Out(port uint16, v uint32) *Asm {
	return a.Emit(0xba).Imm32(uint32(port)).Emit(0xb8).Imm32(v).Emit(0xef)
}

// In: mov edx, port; in eax, dx.
func (a *Asm) In(port uint16) *Asm { return a.Emit(0xba).Imm32(uint32(port)).Emit(0xed) }

// OutEAX: mov edx, port; out dx, eax (eax as it is).
func (a *Asm) OutEAX(port uint16) *Asm { return a.Emit(0xba).Imm32(uint32(port)).Emit(0xef) }

// LoadDataSegs: mov ax, sel; mov es/ds/fs/gs, ax.
func (a *Asm) LoadDataSegs(sel uint16) *Asm {
	a.Emit(0x66, 0xb8, byte(sel), byte(sel>>8))
	return a.Emit(0x8e, 0xc0 /*es*/, 0x8e, 0xd8 /*ds*/, 0x8e, 0xe0 /*fs*/, 0x8e, 0xe8 /*gs*/)
}

// Wrmsr: mov ecx, idx; mov eax, lo; mov edx, hi; wrmsr.
func (a *Asm) Wrmsr(idx uint32, v uint64) *Asm {
	return a.Emit(0xb9).Imm32(idx).Emit(0xb8).Imm32(uint32(v)).Emit(0xba).Imm32(uint32(v>>32)).Emit(0x0f, 0x30)
}

// Hlt, Spin (jmp $) and Int3 stop the vCPU each its own way.
func (a *Asm) Hlt() *Asm  { return a.Emit(0xf4) }
func (a *Asm) Spin() *Asm { return a.Emit(0xeb, 0xfe) } // jmp $
func (a *Asm) Int3() *Asm { return a.Emit(0xcc) }

// DirtyPages writes one qword into each of n consecutive pages from addr.
func (a *Asm) DirtyPages(addr uint64, n int) *Asm { return a.Emit(dirtyLoop(addr, n)...) }

// Outb: mov edx, port; mov eax, v; out dx, al.
func (a *Asm) Outb(port uint16, v uint8) *Asm {
	return a.Emit(0xba).Imm32(uint32(port)).Emit(0xb8).Imm32(uint32(v)).Emit(0xee)
}

// Outw: mov edx, port; mov eax, v; out dx, ax.
func (a *Asm) Outw(port uint16, v uint16) *Asm {
	return a.Emit(0xba).Imm32(uint32(port)).Emit(0xb8).Imm32(uint32(v)).Emit(0x66, 0xef)
}

// ReadSerial reads n bytes from the UART at base into [rdi..] (polling
// LSR.DR), leaving rdi past them.
func (a *Asm) ReadSerial(base uint16, addr uint64, n int) *Asm {
	a.MovImm(RDI, addr).MovImm(RCX, uint64(n))
	loop := len(a.b)
	a.Emit(0xba).Imm32(uint32(base + 5)) // mov edx, LSR
	poll := len(a.b)
	a.Emit(0xec, 0xa8, 0x01)                    // in al, dx; test al, 1
	a.Emit(0x74, byte(int8(poll-(len(a.b)+2)))) // jz poll
	a.Emit(0xba).Imm32(uint32(base))            // mov edx, RBR
	a.Emit(0xec, 0x88, 0x07, 0x48, 0xff, 0xc7)  // in al, dx; mov [rdi], al; inc rdi
	return a.DecRCX().JnzTo(loop)
}

// CliHLT: cli; hlt — with the in-kernel irqchip the vCPU then waits in the
// kernel until paused.
func (a *Asm) CliHLT() *Asm { return a.Emit(0xfa, 0xf4) }

// Condition codes for Jcc (the low nibble of 0x0f 0x8x).
const (
	CCB  = 0x2 // below (CF)
	CCZ  = 0x4 // zero
	CCNZ = 0x5 // not zero
)

// Label is the current offset, a jump target.
func (a *Asm) Label() int { return len(a.b) }

// Jcc: a conditional jump (rel32) to an offset already emitted.
func (a *Asm) Jcc(cc byte, target int) *Asm {
	a.Emit(0x0f, 0x80|cc)
	return a.Imm32(uint32(int32(target - (len(a.b) + 4))))
}

// JccFwd emits a conditional jump (rel32) to be patched by land; it
// returns the jump's offset.
func (a *Asm) JccFwd(cc byte) int {
	a.Emit(0x0f, 0x80|cc).Imm32(0)
	return len(a.b)
}

// JmpFwd emits a jmp (rel32) to be patched by land; it returns the jump's
// offset.
func (a *Asm) JmpFwd() int {
	a.Emit(0xe9).Imm32(0)
	return len(a.b)
}

// Land points the forward jump jccFwd or jmpFwd returned at the current
// offset.
func (a *Asm) Land(j int) *Asm {
	binary.LittleEndian.PutUint32(a.b[j-4:], uint32(int32(len(a.b)-j)))
	return a
}

// Jmp: jmp rel32 to an offset already emitted.
func (a *Asm) Jmp(target int) *Asm {
	a.Emit(0xe9)
	return a.Imm32(uint32(int32(target - (len(a.b) + 4))))
}

// Sti, Cli and Iretq are the interrupt flag's two and the return from a
// handler.
func (a *Asm) Sti() *Asm   { return a.Emit(0xfb) }
func (a *Asm) Cli() *Asm   { return a.Emit(0xfa) }
func (a *Asm) Iretq() *Asm { return a.Emit(0x48, 0xcf) }

// Inb: mov edx, port; in al, dx.
func (a *Asm) Inb(port uint16) *Asm { return a.Emit(0xba).Imm32(uint32(port)).Emit(0xec) }

// OutbAL: mov edx, port; out dx, al (al as it is).
func (a *Asm) OutbAL(port uint16) *Asm { return a.Emit(0xba).Imm32(uint32(port)).Emit(0xee) }

// TestAL: test al, imm8.
func (a *Asm) TestAL(v uint8) *Asm { return a.Emit(0xa8, v) }

// StoreALAtRDI: mov [rdi], al; inc rdi.
func (a *Asm) StoreALAtRDI() *Asm { return a.Emit(0x88, 0x07, 0x48, 0xff, 0xc7) }

// LoadALFromRSI: mov al, [rsi]; inc rsi.
func (a *Asm) LoadALFromRSI() *Asm { return a.Emit(0x8a, 0x06, 0x48, 0xff, 0xc6) }

// DecR8: dec r8.
func (a *Asm) DecR8() *Asm { return a.Emit(0x49, 0xff, 0xc8) }

// LoadWordRBX: movzx eax, word [rbx].
func (a *Asm) LoadWordRBX() *Asm { return a.Emit(0x0f, 0xb7, 0x03) }

// SubEAXR12: sub eax, r12d.
func (a *Asm) SubEAXR12() *Asm { return a.Emit(0x44, 0x29, 0xe0) }

// AndEAX: and eax, imm32.
func (a *Asm) AndEAX(v uint32) *Asm { return a.Emit(0x25).Imm32(v) }

// CmpEAX: cmp eax, imm32.
func (a *Asm) CmpEAX(v uint32) *Asm { return a.Emit(0x3d).Imm32(v) }

// AddR32: add r12d/r13d/r14d/r15d, imm32.
func (a *Asm) AddR32(reg int, v uint32) *Asm {
	return a.Emit(0x41, 0x81, 0xc0|byte(reg&7)).Imm32(v)
}

// IncR32: inc r12d/r13d/r14d/r15d.
func (a *Asm) IncR32(reg int) *Asm { return a.Emit(0x41, 0xff, 0xc0|byte(reg&7)) }

// StoreWordAtRBX: mov word [rbx], r12w/r13w/r14w/r15w.
func (a *Asm) StoreWordAtRBX(reg int) *Asm { return a.Emit(0x66, 0x44, 0x89, 0x03|byte(reg&7)<<3) }

// TestByteRBX: test byte [rbx], imm8.
func (a *Asm) TestByteRBX(v uint8) *Asm { return a.Emit(0xf6, 0x03, v) }
