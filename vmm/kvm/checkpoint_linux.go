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
type linuxMemory struct{ m *Machine }

var _ checkpoint.Memory = linuxMemory{}

// restoreFault, when set, damages the restored guest RAM before the verify
// gate sees it: a test-only fault, set by the package's test binary alone
// (export_linux_test.go, under nested.FaultEnv=restore; the nested job's
// -inject-fault restore) to prove that a restore that does not verify
// fails the job. Nil in every other build.
var restoreFault func(m *Machine)

// Stop implements checkpoint.Memory: the vCPU leaves KVM_RUN.
func (mem linuxMemory) Stop(ctx context.Context) error { return mem.m.pause(ctx) }

// Resume implements checkpoint.Memory.
func (mem linuxMemory) Resume(context.Context) error {
	mem.m.resume()
	return nil
}

// Save implements checkpoint.Memory: the VM's checkpoint (RAM delta,
// vCPU, in-kernel and attached device state).
func (mem linuxMemory) Save(ctx context.Context) (checkpoint.Ref, error) {
	id, err := mem.m.vm.Checkpoint(ctx)
	return checkpoint.Ref(id), err
}

// Load implements checkpoint.Memory. The VM drops the checkpoints above
// ref itself. A guest that died (faulted, reset) is alive again after it,
// with a fresh agent channel: restoring is how a session goes on after a
// misbehaving branch.
func (mem linuxMemory) Load(ctx context.Context, ref checkpoint.Ref, _ []checkpoint.Ref) (checkpoint.LoadStats, error) {
	if err := mem.m.vm.Restore(ctx, vmm.CheckpointID(ref)); err != nil {
		return checkpoint.LoadStats{}, err
	}
	if restoreFault != nil {
		restoreFault(mem.m)
	}
	mem.m.revive()
	st := mem.m.vm.Stats() // before resume: a running vCPU holds the VM
	return checkpoint.LoadStats{RAM: st.RestoreCopy, Pages: st.RestorePages}, nil
}

// Drop implements checkpoint.Memory.
func (mem linuxMemory) Drop(ctx context.Context, ref checkpoint.Ref) error {
	return mem.m.vm.Delete(ctx, vmm.CheckpointID(ref))
}

// Depth implements checkpoint.Memory.
func (mem linuxMemory) Depth() int { return len(mem.m.vm.Checkpoints()) }

// RAMHash implements checkpoint.Memory: fork.Hash of all guest RAM.
func (mem linuxMemory) RAMHash() ([32]byte, error) { return fork.Hash(mem.m.vm.mem), nil }

// revive drops what the guest sent since the checkpoint just loaded (it
// had sent nothing unread when it was taken: calls complete before one is)
// and brings a dead guest back, with a fresh channel.
func (m *Machine) revive() {
	m.runMu.Lock()
	revived := m.dead != nil
	m.dead = nil
	m.runMu.Unlock()
	for _, st := range m.streams() {
		st.reset()
		if revived {
			st.reopen()
		}
	}
	if revived {
		m.agent = agent.NewClient(m.stream, m.log)
	}
}

// Checkpoint implements vmm.Machine: the vCPU stops, the VM saves RAM
// (its dirty set), vCPU, in-kernel and attached device state, every disk
// gets a new overlay layer, and the guest goes on.
func (m *Machine) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return 0, err
	}
	if err := m.deadErr(); err != nil {
		return 0, m.died(err)
	}
	id, err := m.path.Checkpoint(ctx)
	return id, m.noteBroken(err)
}

// Restore implements vmm.Machine. A guest that died comes back too.
func (m *Machine) Restore(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	return m.noteBroken(m.path.Restore(ctx, id))
}

// Delete implements vmm.Machine.
func (m *Machine) Delete(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	return m.noteBroken(m.path.Delete(ctx, id))
}

// Checkpoints implements vmm.Machine.
func (m *Machine) Checkpoints() []vmm.CheckpointID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.path.IDs()
}

// usable is vmm.ErrClosed after Close, the path's error once it broke, or nil.
func (m *Machine) usable() error { return m.path.Usable(m.closed) }

// noteBroken returns err; when the path broke, the guest stays stopped for
// good and the agent channel fails with the path's error.
func (m *Machine) noteBroken(err error) error {
	if berr := m.path.Err(); berr != nil {
		m.runMu.Lock()
		if m.dead == nil {
			m.dead = berr
		}
		m.runMu.Unlock()
		for _, st := range m.streams() {
			st.closeWith(fmt.Errorf("kvm: %w", berr))
		}
	}
	return err
}
