package kvm

import (
	"context"
	"fmt"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/checkpoint"
)

// linuxMemory is a Linux machine's part of a checkpoint (the shared path,
// package checkpoint, does the rest): the VM's RAM through its fork.Tree,
// and the vCPU, in-kernel and attached device state.
type linuxMemory struct{ lm *Machine }

var _ checkpoint.Memory = linuxMemory{}

// Stop implements checkpoint.Memory: the vCPU leaves KVM_RUN.
func (m linuxMemory) Stop(ctx context.Context) error { return m.lm.pause(ctx) }

// Resume implements checkpoint.Memory.
func (m linuxMemory) Resume(context.Context) error {
	m.lm.resume()
	return nil
}

// Save implements checkpoint.Memory: the VM's checkpoint (RAM delta,
// vCPU, in-kernel and attached device state).
func (m linuxMemory) Save(ctx context.Context) (checkpoint.Ref, error) {
	id, err := m.lm.vm.Checkpoint(ctx)
	return checkpoint.Ref(id), err
}

// Load implements checkpoint.Memory. The VM drops the checkpoints above
// ref itself. A guest that died (faulted, reset) is alive again after it,
// with a fresh agent channel: restoring is how a session goes on after a
// misbehaving branch.
func (m linuxMemory) Load(ctx context.Context, ref checkpoint.Ref, _ []checkpoint.Ref) (checkpoint.LoadStats, error) {
	if err := m.lm.vm.Restore(ctx, vmm.CheckpointID(ref)); err != nil {
		return checkpoint.LoadStats{}, err
	}
	m.lm.revive()
	st := m.lm.vm.Stats() // before resume: a running vCPU holds the VM
	return checkpoint.LoadStats{RAM: st.RestoreCopy, Pages: st.RestorePages}, nil
}

// Drop implements checkpoint.Memory.
func (m linuxMemory) Drop(ctx context.Context, ref checkpoint.Ref) error {
	return m.lm.vm.Delete(ctx, vmm.CheckpointID(ref))
}

// Depth implements checkpoint.Memory.
func (m linuxMemory) Depth() int { return len(m.lm.vm.Checkpoints()) }

// RAMHash implements checkpoint.Memory: fork.Hash of all guest RAM.
func (m linuxMemory) RAMHash() ([32]byte, error) { return fork.Hash(m.lm.vm.mem), nil }

// revive drops what the guest sent since the checkpoint just loaded (it
// had sent nothing unread when it was taken: calls complete before one is)
// and brings a dead guest back, with a fresh channel.
func (lm *Machine) revive() {
	lm.runMu.Lock()
	revived := lm.dead != nil
	lm.dead = nil
	lm.runMu.Unlock()
	lm.stream.reset()
	if revived {
		lm.stream.reopen()
		lm.agent = agent.NewClient(lm.stream, lm.log)
	}
}

// Checkpoint implements vmm.Machine: the vCPU stops, the VM saves RAM
// (its dirty set), vCPU, in-kernel and attached device state, every disk
// gets a new overlay layer, and the guest goes on.
func (lm *Machine) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if err := lm.usable(); err != nil {
		return 0, err
	}
	if err := lm.deadErr(); err != nil {
		return 0, lm.died(err)
	}
	id, err := lm.path.Checkpoint(ctx)
	return id, lm.noteBroken(err)
}

// Restore implements vmm.Machine. A guest that died comes back too.
func (lm *Machine) Restore(ctx context.Context, id vmm.CheckpointID) error {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if err := lm.usable(); err != nil {
		return err
	}
	return lm.noteBroken(lm.path.Restore(ctx, id))
}

// Delete implements vmm.Machine.
func (lm *Machine) Delete(ctx context.Context, id vmm.CheckpointID) error {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if err := lm.usable(); err != nil {
		return err
	}
	return lm.noteBroken(lm.path.Delete(ctx, id))
}

// Checkpoints implements vmm.Machine.
func (lm *Machine) Checkpoints() []vmm.CheckpointID {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return lm.path.IDs()
}

// usable is vmm.ErrClosed after Close, the path's error once it broke, or nil.
func (lm *Machine) usable() error {
	if lm.closed {
		return vmm.ErrClosed
	}
	return lm.path.Err()
}

// noteBroken returns err; when the path broke, the guest stays stopped for
// good and the agent channel fails with the path's error.
func (lm *Machine) noteBroken(err error) error {
	if berr := lm.path.Err(); berr != nil {
		lm.runMu.Lock()
		if lm.dead == nil {
			lm.dead = berr
		}
		lm.runMu.Unlock()
		lm.stream.closeWith(fmt.Errorf("kvm: %w", berr))
	}
	return err
}
