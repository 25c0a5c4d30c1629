package x86asm_test

import (
	"encoding/hex"
	"testing"

	"github.com/themisfs/themis/vmm/kvm/x86asm"
)

// TestEncodings: programs against their bytes as binutils' objdump
// disassembles them (the listing beside each): register numbering, REX
// prefixes, backward and patched forward jumps.
func TestEncodings(t *testing.T) {
	t.Parallel()
	mixed := func() []byte {
		var a x86asm.Asm
		a.MovImm(x86asm.RDI, 0x1000).MovImm(x86asm.R12, 5).Out(0xf4, 3).In(0x3f8).Outb(0x2f8, 'h').Outw(0x10, 0x1234)
		l := a.Label()
		a.DecRCX().JnzTo(l).Jcc(x86asm.CCZ, l)
		j := a.JccFwd(x86asm.CCNZ)
		a.Hlt().Land(j)
		a.AddR32(x86asm.R13, 7).IncR32(x86asm.R14).StoreWordAtRBX(x86asm.R13).Wrmsr(0x1b, 0xfee00900).LoadDataSegs(0x18).Iretq()
		return a.Bytes()
	}
	for _, tt := range []struct {
		name string
		got  []byte
		want string
	}{
		// movabs $0x1000,%rdi; movabs $0x5,%r12; mov $0xf4,%edx; mov $0x3,%eax; out %eax,(%dx);
		// mov $0x3f8,%edx; in (%dx),%eax; mov $0x2f8,%edx; mov $0x68,%eax; out %al,(%dx);
		// mov $0x10,%edx; mov $0x1234,%eax; out %ax,(%dx); 3c: dec %rcx; jne 0x3c; je 0x3c;
		// jne 0x52; hlt; 52: add $0x7,%r13d; inc %r14d; mov %r13w,(%rbx); mov $0x1b,%ecx;
		// mov $0xfee00900,%eax; mov $0x0,%edx; wrmsr; mov $0x18,%ax; mov %eax,%es/%ds/%fs/%gs; iretq
		{"mixed", mixed(), "48bf001000000000000049bc0500000000000000baf4000000b803000000efbaf8030000edbaf8020000b868000000ee" +
			"ba10000000b83412000066ef48ffc90f85f7ffffff0f84f1ffffff0f8501000000f44181c50700000041ffc66644892b" +
			"b91b000000b80009e0feba000000000f3066b818008ec08ed88ee08ee848cf"},
		// movabs $0x200000,%rdi; movabs $0x3,%rcx; movabs $0x5a5a5a5a,%rax; 1e: mov %rax,(%rdi);
		// add $0x1000,%rdi; dec %rcx; jne 0x1e; mov $0xf4,%edx; mov $0x9,%eax; out %eax,(%dx)
		{"dirty", x86asm.DirtyProgram(0xf4, 0x200000, 3, 9), "48bf000020000000000048b9030000000000000048b85a5a5a5a00000000" +
			"4889074881c70010000048ffc90f85edffffffbaf4000000b809000000ef"},
		// pages < 1: the exit alone
		{"dirty-none", x86asm.DirtyProgram(0xf4, 0x200000, 0, 7), "baf4000000b807000000ef"},
		{"dirty-negative", x86asm.DirtyProgram(0x80, 0x200000, -1, 1), "ba80000000b801000000ef"},
	} {
		if got := hex.EncodeToString(tt.got); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// TestZeroValueIsEmpty: a new assembler holds no bytes.
func TestZeroValueIsEmpty(t *testing.T) {
	var a x86asm.Asm
	if n := len(a.Bytes()); n != 0 {
		t.Errorf("zero Asm holds %d bytes", n)
	}
}
