package qemu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/internal/memguard"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/checkpoint"
)

// memory is a QEMU machine's part of a checkpoint (the shared path,
// package checkpoint, does the rest): CPU and device state (and, in
// RestoreFull mode, RAM) in internal snapshots of the scratch qcow2 node,
// and in RestoreDevices mode the RAM deltas of a ramTree.
type memory struct {
	m      *Machine
	deltas *ramTree                   // RestoreDevices mode; nil until the first checkpoint
	held   map[checkpoint.Ref]fork.ID // saved states → their RAM checkpoint (0 in RestoreFull mode)
	last   checkpoint.Ref
	stale  []string  // snapshot tags dropped by a restore but still in the state image
	sum    *stateSum // the state image's checksum (RestoreDevices mode; nil: none)
	// fault is set once an access to guest RAM faulted (the RAM file lost
	// pages): it wraps vmm.ErrBroken and every later call but Close fails
	// with it (Machine.usable).
	fault error
}

// broke returns err, first recording it as the machine's fault when it
// is one (memguard.ErrFault).
func (s *memory) broke(err error) error {
	if s.fault == nil && errors.Is(err, memguard.ErrFault) {
		s.fault = fmt.Errorf("%w: %w", vmm.ErrBroken, err)
	}
	if s.fault != nil {
		return s.fault
	}
	return err
}

var _ checkpoint.Memory = (*memory)(nil)

// tag names the internal snapshot of ref.
func tag(ref checkpoint.Ref) string { return fmt.Sprintf("c%d", ref) }

// Stop implements checkpoint.Memory: QMP stop, which drains block I/O.
func (s *memory) Stop(ctx context.Context) error {
	if err := s.m.qmp.Execute(ctx, "stop", nil, nil); err != nil {
		return s.m.failed(err)
	}
	return nil
}

// Resume implements checkpoint.Memory.
func (s *memory) Resume(ctx context.Context) error {
	if err := s.m.qmp.Execute(ctx, "cont", nil, nil); err != nil {
		return s.m.failed(err)
	}
	return nil
}

// Save implements checkpoint.Memory: snapshot-save, then (RestoreDevices)
// the RAM delta against the parent.
func (s *memory) Save(ctx context.Context) (checkpoint.Ref, error) {
	if err := s.sum.check(); err != nil {
		return 0, err
	}
	// Snapshots dropped by earlier restores are deleted here, off the restore path.
	for len(s.stale) > 0 {
		if err := s.deleteTag(ctx, s.stale[0]); err != nil {
			return 0, s.m.failed(err)
		}
		s.stale = s.stale[1:]
	}
	ref := s.last + 1
	if err := s.m.runJob(ctx, "snapshot-save", map[string]any{"tag": tag(ref), "vmstate": "state", "devices": []string{"state"}}); err != nil {
		return 0, s.m.failed(err)
	}
	s.last = ref
	if err := s.settled(ctx); err != nil {
		s.stale = append(s.stale, tag(ref))
		return 0, err
	}
	var ramID fork.ID
	if s.m.cfg.Restore == vmm.RestoreDevices {
		var err error
		if s.deltas == nil {
			if s.deltas, err = newRAMTree(s.m.ram.mem); err != nil {
				s.stale = append(s.stale, tag(ref))
				return 0, s.broke(err)
			}
		}
		if ramID, err = s.deltas.checkpoint(); err != nil {
			s.stale = append(s.stale, tag(ref))
			return 0, s.broke(err)
		}
	}
	s.held[ref] = ramID
	return ref, nil
}

// Load implements checkpoint.Memory: RAM goes back first (RestoreDevices),
// because virtio ring indices live in RAM and in the device and must revert
// together; then snapshot-load. The dropped snapshots are deleted lazily,
// at the next Save.
func (s *memory) Load(ctx context.Context, ref checkpoint.Ref, dropped []checkpoint.Ref) (checkpoint.LoadStats, error) {
	var st checkpoint.LoadStats
	if err := s.sum.check(); err != nil {
		return st, err // before anything changed
	}
	if s.deltas != nil {
		t0 := time.Now()
		pages, err := s.deltas.restore(s.held[ref])
		if err != nil {
			return st, s.broke(err)
		}
		st = checkpoint.LoadStats{RAM: time.Since(t0), Pages: pages}
	}
	if err := s.m.runJob(ctx, "snapshot-load", map[string]any{"tag": tag(ref), "vmstate": "state", "devices": []string{"state"}}); err != nil {
		return st, s.m.failed(err)
	}
	if err := s.settled(ctx); err != nil {
		return st, err
	}
	for _, d := range dropped {
		s.stale = append(s.stale, tag(d))
		delete(s.held, d)
	}
	return st, nil
}

// Drop implements checkpoint.Memory.
func (s *memory) Drop(ctx context.Context, ref checkpoint.Ref) error {
	if err := s.sum.check(); err != nil {
		return err
	}
	if s.deltas != nil {
		if err := s.deltas.delete(s.held[ref]); err != nil {
			return err
		}
	}
	delete(s.held, ref)
	if err := s.deleteTag(ctx, tag(ref)); err != nil {
		return s.m.failed(err)
	}
	return s.settled(ctx)
}

// Depth implements checkpoint.Memory: the RAM deltas' depth in
// RestoreDevices mode, else the number of snapshots held.
func (s *memory) Depth() int {
	if s.deltas != nil {
		return s.deltas.depth()
	}
	return len(s.held)
}

// RAMHash implements checkpoint.Memory.
func (s *memory) RAMHash() ([32]byte, error) {
	h, err := hashRAM(s.m.ram.mem)
	return h, s.broke(err)
}

// settled records the state image's checksum after a snapshot job, once
// QEMU has written back what it cached of it: a "stop" of the stopped
// guest drains and flushes every block node (without it the job's refcount
// and table updates reach the file at the next stop, after the checksum).
func (s *memory) settled(ctx context.Context) error {
	if s.sum == nil {
		return nil
	}
	if err := s.m.qmp.Execute(ctx, "stop", nil, nil); err != nil {
		return s.m.failed(err)
	}
	return s.sum.took()
}

func (s *memory) deleteTag(ctx context.Context, tag string) error {
	return s.m.runJob(ctx, "snapshot-delete", map[string]any{"tag": tag, "devices": []string{"state"}})
}

// Checkpoint implements vmm.Machine.
func (m *Machine) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return 0, err
	}
	return m.path.Checkpoint(ctx)
}

// Restore implements vmm.Machine.
func (m *Machine) Restore(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	return m.path.Restore(ctx, id)
}

// Delete implements vmm.Machine.
func (m *Machine) Delete(ctx context.Context, id vmm.CheckpointID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	return m.path.Delete(ctx, id)
}

// Checkpoints implements vmm.Machine.
func (m *Machine) Checkpoints() []vmm.CheckpointID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.path.IDs()
}

// usable is vmm.ErrClosed after Close, a fault on guest RAM, the path's
// error once it broke, or nil.
func (m *Machine) usable() error {
	if m.closed || m.memory.fault == nil {
		return m.path.Usable(m.closed)
	}
	return m.memory.fault
}
