package vmmtest

import "encoding/binary"

// TinyELF returns a minimal static x86-64 Linux executable whose only code is
// code, loaded at 0x400000. It lets tests run programs in the guest without a
// toolchain.
func TinyELF(code []byte) []byte {
	const (
		base    = 0x400000
		ehsize  = 64
		phsize  = 56
		codeOff = ehsize + phsize
	)
	total := codeOff + len(code)
	b := make([]byte, total)
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0}) // 64-bit, little endian, version 1, SysV
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)            // ET_EXEC
	le.PutUint16(b[18:], 0x3e)         // EM_X86_64
	le.PutUint32(b[20:], 1)            // EV_CURRENT
	le.PutUint64(b[24:], base+codeOff) // e_entry
	le.PutUint64(b[32:], ehsize)       // e_phoff
	le.PutUint16(b[52:], ehsize)       // e_ehsize
	le.PutUint16(b[54:], phsize)       // e_phentsize
	le.PutUint16(b[56:], 1)            // e_phnum
	ph := b[ehsize:]
	le.PutUint32(ph[0:], 1)              // PT_LOAD
	le.PutUint32(ph[4:], 5)              // PF_R|PF_X
	le.PutUint64(ph[16:], base)          // p_vaddr
	le.PutUint64(ph[24:], base)          // p_paddr
	le.PutUint64(ph[32:], uint64(total)) // p_filesz
	le.PutUint64(ph[40:], uint64(total)) // p_memsz
	le.PutUint64(ph[48:], 0x1000)        // p_align
	copy(b[codeOff:], code)
	return b
}

// ExitCode is machine code for exit(code).
func ExitCode(code uint8) []byte {
	return []byte{
		0xbf, code, 0, 0, 0, // mov edi, code
		0xb8, 60, 0, 0, 0, // mov eax, 60 (exit)
		0x0f, 0x05, // syscall
	}
}

// SpinCode is machine code for an endless loop.
func SpinCode() []byte { return []byte{0xeb, 0xfe} }
