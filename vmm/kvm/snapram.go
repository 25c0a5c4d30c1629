package kvm

import (
	"encoding/binary"
	"fmt"

	"github.com/themisfs/themis/fork"
)

// parseRAMSection walks a snapshot's RAM section (u32 count, then per
// range u64 offset, u64 length, bytes) and calls put for each range, after
// checking it lies inside RAM of size bytes and inside the section. The
// section is untrusted input.
func parseRAMSection(b []byte, size uint64, put func(off uint64, data []byte)) error {
	if len(b) < 4 {
		return fmt.Errorf("kvm: load snapshot: %w: RAM section too short", fork.ErrCorrupt)
	}
	n := binary.LittleEndian.Uint32(b)
	rest := b[4:]
	for i := range n {
		if len(rest) < 16 {
			return fmt.Errorf("kvm: load snapshot: %w: RAM range %d header truncated", fork.ErrCorrupt, i)
		}
		off, l := binary.LittleEndian.Uint64(rest), binary.LittleEndian.Uint64(rest[8:])
		rest = rest[16:]
		if off > size || l > size-off || l > uint64(len(rest)) {
			return fmt.Errorf("kvm: load snapshot: %w: RAM range %d [%#x, +%#x) outside RAM or the file", fork.ErrCorrupt, i, off, l)
		}
		put(off, rest[:l])
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return fmt.Errorf("kvm: load snapshot: %w: %d bytes after the last RAM range", fork.ErrCorrupt, len(rest))
	}
	return nil
}
