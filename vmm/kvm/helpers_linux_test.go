package kvm

import "encoding/binary"

func xsaveBytes(x *XSAVE) []byte {
	b := make([]byte, 4096)
	for i, w := range x.Region {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

func setXSAVEBytes(x *XSAVE, b []byte) {
	for i := range x.Region {
		x.Region[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
}

// cpuidHas reports whether the CPUID the vCPU was given has bit in register
// reg ('a'..'d') of leaf fn, subleaf idx.
func (m *VM) cpuidHas(fn, idx uint32, reg byte, bit uint) bool {
	for _, e := range m.cpuid.Entries[:m.cpuid.N] {
		if e.Function == fn && e.Index == idx {
			v := map[byte]uint32{'a': e.EAX, 'b': e.EBX, 'c': e.ECX, 'd': e.EDX}[reg]
			return v&(1<<bit) != 0
		}
	}
	return false
}
