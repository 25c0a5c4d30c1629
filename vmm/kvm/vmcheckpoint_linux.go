package kvm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/vmm"
	"golang.org/x/sys/unix"
)

// CheckpointBytes is the host memory the VM's checkpoints hold: the fork
// shadow (counted whole) and the undo pages; 0 before the first checkpoint.
func (m *VM) CheckpointBytes() int64 {
	if m.tree == nil {
		return 0
	}
	return int64(len(m.shadow)) + int64(m.tree.UndoPages())*PageSize
}

// arm maps the shadow and takes the root copy of the populated parts of RAM.
func (m *VM) arm() error {
	start := time.Now()
	shadow, err := unix.Mmap(-1, 0, len(m.mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("kvm: mmap shadow RAM: %w", err)
	}
	tree, err := fork.NewTree(m.mem, shadow, PageSize)
	if err != nil {
		return errors.Join(err, unix.Munmap(shadow))
	}
	if err := m.harvest(tree.Dirty()); err != nil { // clears the log; Arm copies everything anyway
		return errors.Join(err, unix.Munmap(shadow))
	}
	ranges, err := m.populated()
	if err != nil {
		return errors.Join(err, unix.Munmap(shadow))
	}
	if err := tree.Arm(ranges); err != nil {
		return errors.Join(err, unix.Munmap(shadow))
	}
	m.shadow, m.tree = shadow, tree
	m.stats.Arm = time.Since(start)
	m.stats.ArmBytes = 0
	for _, r := range ranges {
		m.stats.ArmBytes += int64(r.Len)
	}
	return nil
}

// populated lists the RAM ranges the memfd holds pages for (SEEK_DATA /
// SEEK_HOLE); holes read as zero, like the fresh shadow.
func (m *VM) populated() ([]fork.Range, error) {
	var out []fork.Range
	size := int64(len(m.mem))
	for off := int64(0); off < size; {
		d, err := unix.Seek(m.mfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("kvm: guest RAM SEEK_DATA: %w", err)
		}
		h, err := unix.Seek(m.mfd, d, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("kvm: guest RAM SEEK_HOLE: %w", err)
		}
		lo, hi := d&^(PageSize-1), min((h+PageSize-1)&^(PageSize-1), size)
		out = append(out, fork.Range{Off: int(lo), Len: int(hi - lo)})
		off = hi
	}
	return out, nil
}

// Checkpoint saves the vCPU, VM and device state and pushes a memory delta
// of the pages dirtied since the previous checkpoint. The first checkpoint
// also takes the root copy of RAM (Stats.Arm).
func (m *VM) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, vmm.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := time.Now()
	if m.tree == nil {
		if err := m.arm(); err != nil {
			return 0, err
		}
	}
	if err := m.harvest(m.tree.Dirty()); err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	st := &checkpointState{scratch: m.scratch}
	if m.att != nil {
		st.devices = m.att.saveDevices()
	}
	var err error
	if st.vcpu, err = m.saveVCPU(); err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	if st.vm, err = m.saveVM(); err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	id, err := m.tree.Checkpoint()
	if err != nil {
		return 0, fmt.Errorf("kvm: checkpoint: %w", err)
	}
	m.states[id] = st
	m.stats.Checkpoint = time.Since(start)
	return vmm.CheckpointID(id), nil
}

// Restore puts RAM back (only the pages dirtied since id), then the vCPU,
// VM and device state, and drops the checkpoints above id.
func (m *VM) Restore(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	st, ok := m.states[fork.ID(id)]
	if !ok {
		return fmt.Errorf("kvm: restore %d: %w", id, vmm.ErrUnknownCheckpoint)
	}
	if err := m.harvest(m.tree.Dirty()); err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	harvested := time.Now()
	copied, err := m.tree.Restore(fork.ID(id))
	if err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	restored := time.Now()
	for other := range m.states {
		if other > fork.ID(id) {
			delete(m.states, other)
		}
	}
	if err := m.loadVCPU(&st.vcpu); err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	if err := m.loadVM(&st.vm); err != nil {
		return fmt.Errorf("kvm: restore %d: %w", id, err)
	}
	m.scratch = st.scratch
	if m.att != nil {
		if err := m.att.loadDevices(st.devices); err != nil {
			return fmt.Errorf("kvm: restore %d: %w", id, err)
		}
	}
	end := time.Now()
	m.stats.Restore = end.Sub(start)
	m.stats.RestoreHarvest, m.stats.RestoreCopy, m.stats.RestoreState = harvested.Sub(start), restored.Sub(harvested), end.Sub(restored)
	m.stats.RestorePages = copied
	return nil
}

// Delete removes a checkpoint from the path; the others stay restorable.
func (m *VM) Delete(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vmm.ErrClosed
	}
	if _, ok := m.states[fork.ID(id)]; !ok {
		return fmt.Errorf("kvm: delete %d: %w", id, vmm.ErrUnknownCheckpoint)
	}
	if err := m.tree.Delete(fork.ID(id)); err != nil {
		return fmt.Errorf("kvm: delete %d: %w", id, err)
	}
	delete(m.states, fork.ID(id))
	return nil
}

// Checkpoints lists the current path, oldest first.
func (m *VM) Checkpoints() []vmm.CheckpointID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tree == nil {
		return nil
	}
	var out []vmm.CheckpointID
	for _, id := range m.tree.Path() {
		out = append(out, vmm.CheckpointID(id))
	}
	return out
}

// RAMHash implements vmm.Hasher: blake3 of all guest RAM (fork.Hash).
func (m *VM) RAMHash(ctx context.Context) ([32]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return [32]byte{}, vmm.ErrClosed
	}
	return fork.Hash(m.mem), ctx.Err()
}
