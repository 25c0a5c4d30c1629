package kvm

import (
	"encoding/binary"
	"fmt"

	"github.com/themisfs/themis/fork"
)

// dirtyTarget is where harvested dirty pages go: the tree's set once armed,
// else a throwaway set (before arm every page is copied anyway).
func (m *VM) dirtyTarget() *fork.Set {
	if m.tree != nil {
		return m.tree.Dirty()
	}
	return fork.NewSet(len(m.mem) / PageSize)
}

// harvest moves the pages the guest dirtied since the last harvest into s
// and re-arms dirty tracking for them.
func (m *VM) harvest(s *fork.Set) error {
	if m.cfg.DirtyRing {
		return m.harvestRing(s)
	}
	if err := getDirtyLog(m.vmFD, 0, m.bitmap); err != nil {
		return err
	}
	if m.manualProtect {
		any := false
		for _, w := range m.bitmap {
			if w != 0 {
				any = true
				break
			}
		}
		if !any {
			return nil
		}
		if err := clearDirty(m.vmFD, 0, uint32(len(m.mem)/PageSize), m.bitmap); err != nil {
			return err
		}
	}
	s.AddBitmap(0, m.bitmap)
	return nil
}

func (m *VM) harvestRing(s *fork.Set) error {
	n := uint32(len(m.ring) / dirtyGFNSize)
	pages := uint64(len(m.mem) / PageSize)
	got := 0
	for ; ; m.ringNext++ {
		e := m.ring[(m.ringNext%n)*dirtyGFNSize:][:dirtyGFNSize]
		if binary.LittleEndian.Uint32(e)&dirtyGFNDirty == 0 {
			break
		}
		slot, off := binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint64(e[8:])
		if slot != 0 || off >= pages {
			return fmt.Errorf("kvm: dirty ring entry for slot %d page %d outside guest RAM", slot, off)
		}
		s.Add(int(off))
		binary.LittleEndian.PutUint32(e, dirtyGFNReset)
		got++
	}
	if got == 0 {
		return nil
	}
	if _, err := ioctlVal(m.vmFD, "KVM_RESET_DIRTY_RINGS", kvmResetDirtyRings, 0); err != nil {
		return err
	}
	if got == int(n) {
		// A kernel that honours the soft limit exits with at least its
		// reserved entries free; a completely full ring means pushes went
		// past it and dirty pages may have been overwritten (seen on PVM
		// hosts with small rings). Restoring from it would be unsound.
		return fmt.Errorf("%w: %d entries", ErrRingOverflow, n)
	}
	return nil
}
