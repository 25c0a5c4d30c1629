package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/themisfs/themis/vmm"
)

// Ref is a backend's own name for one saved memory and device state.
type Ref uint64

// LoadStats is what a Load spent putting RAM back on the host.
type LoadStats struct {
	// RAM is the time spent copying RAM pages back.
	RAM time.Duration
	// Pages is the number of pages copied back.
	Pages int
}

// Memory is a backend's memory and device part of a checkpoint. Every
// method but Stop and Resume is called with the guest stopped.
type Memory interface {
	// Stop stops the guest: vCPUs out of guest code, device I/O drained.
	Stop(ctx context.Context) error
	// Resume lets a stopped guest run again.
	Resume(ctx context.Context) error
	// Save saves RAM, vCPU and device state and returns the backend's name
	// for it. A failed Save holds nothing new.
	Save(ctx context.Context) (Ref, error)
	// Load puts RAM, vCPU and device state back to ref and forgets dropped
	// (the states saved after ref, oldest first); ref stays loadable. An
	// error wrapping vmm.ErrCorrupt says Load refused before it changed
	// anything (the saved state failed its checksum).
	Load(ctx context.Context, ref Ref, dropped []Ref) (LoadStats, error)
	// Drop forgets ref; the states around it stay loadable.
	Drop(ctx context.Context, ref Ref) error
	// Depth is the number of states held (for the lockstep assertion).
	Depth() int
	// RAMHash is a hash of all guest RAM (for the verify gate).
	RAMHash() ([32]byte, error)
}

// Config describes a Path.
type Config struct {
	// Backend names the backend in errors ("qemu", "kvm").
	Backend string
	// Memory is the backend's memory and device part.
	Memory Memory
	// Disks are the machine's disks; each gets one overlay layer per checkpoint.
	Disks []vmm.Disk
	// Verify records hashes at every checkpoint and compares them at every restore.
	Verify bool
}

// Path is the current path of checkpoints of one machine. See the package
// comment for what it owns and its failure policy.
type Path struct {
	cfg     Config
	base    []int // each disk's overlay depth before the first checkpoint
	records []record
	nextID  vmm.CheckpointID
	broken  error // non-nil once the path is broken

	timingMu sync.Mutex // Timings may be read while a checkpoint or restore runs
	timing   vmm.TimingInfo
}

// record is one checkpoint on the path.
type record struct {
	id    vmm.CheckpointID
	ref   Ref
	ram   [32]byte   // with Verify
	disks [][32]byte // with Verify
}

// New returns an empty path over cfg.Disks at their current overlay depths.
func New(cfg Config) *Path {
	p := &Path{cfg: cfg, nextID: 1}
	for _, d := range cfg.Disks {
		p.base = append(p.base, d.Device.Depth())
	}
	return p
}

// Err is nil, or the error every call returns since the path broke.
func (p *Path) Err() error { return p.broken }

// Usable is what a machine's every call returns first: vmm.ErrClosed
// once the machine is closed, the path's error once it broke, else nil.
func (p *Path) Usable(closed bool) error {
	if closed {
		return vmm.ErrClosed
	}
	return p.broken
}

// IDs lists the checkpoints on the path, oldest first.
func (p *Path) IDs() []vmm.CheckpointID {
	ids := make([]vmm.CheckpointID, len(p.records))
	for i, r := range p.records {
		ids[i] = r.id
	}
	return ids
}

// Timings returns the durations of the last checkpoint and restore, with
// the backend's boot time. Unlike the other methods it may be called at
// any time, from any goroutine.
func (p *Path) Timings(boot time.Duration) vmm.TimingInfo {
	p.timingMu.Lock()
	defer p.timingMu.Unlock()
	t := p.timing
	t.Boot = boot
	return t
}

// setTiming updates the timings under their lock.
func (p *Path) setTiming(f func(t *vmm.TimingInfo)) {
	p.timingMu.Lock()
	defer p.timingMu.Unlock()
	f(&p.timing)
}

// Checkpoint stops the guest, saves its memory and devices, pushes a layer
// on every disk, records the hashes (Verify) and resumes the guest.
func (p *Path) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	if p.broken != nil {
		return 0, p.broken
	}
	t0 := time.Now()
	if err := p.cfg.Memory.Stop(ctx); err != nil {
		return 0, err
	}
	id, err := p.checkpoint(ctx)
	if err := p.resume(ctx, err); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	p.setTiming(func(t *vmm.TimingInfo) { t.Checkpoint = d })
	return id, nil
}

func (p *Path) checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	ref, err := p.cfg.Memory.Save(ctx)
	if err != nil {
		return 0, err
	}
	for _, d := range p.cfg.Disks {
		d.Device.Push()
	}
	r := record{id: p.nextID, ref: ref}
	p.nextID++
	p.records = append(p.records, r)
	if p.cfg.Verify {
		if r.ram, r.disks, err = p.hashAll(); err != nil {
			return 0, p.breakWith(fmt.Errorf("%s: checkpoint %d: %w", p.cfg.Backend, r.id, err))
		}
		p.records[len(p.records)-1] = r
	}
	if err := p.assertDepths(); err != nil {
		return 0, p.breakWith(err)
	}
	return r.id, nil
}

// Restore stops the guest, puts memory, devices and every disk back to
// checkpoint id, drops the checkpoints above it, checks the lockstep and
// the verify gate, and resumes the guest.
func (p *Path) Restore(ctx context.Context, id vmm.CheckpointID) error {
	idx, err := p.lookup("restore", id)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := p.cfg.Memory.Stop(ctx); err != nil {
		return err
	}
	if err := p.resume(ctx, p.restore(ctx, idx)); err != nil {
		return err
	}
	d := time.Since(t0)
	p.setTiming(func(t *vmm.TimingInfo) { t.Restore = d })
	return nil
}

func (p *Path) restore(ctx context.Context, idx int) error {
	r := p.records[idx]
	dropped := make([]Ref, 0, len(p.records)-idx-1)
	for _, d := range p.records[idx+1:] {
		dropped = append(dropped, d.ref)
	}
	st, err := p.cfg.Memory.Load(ctx, r.ref, dropped)
	if errors.Is(err, vmm.ErrCorrupt) {
		// Refused before anything changed: the path stays as it was.
		return fmt.Errorf("%s: restore %d: %w", p.cfg.Backend, r.id, err)
	}
	if err != nil {
		return p.breakWith(fmt.Errorf("%s: restore %d: %w", p.cfg.Backend, r.id, err))
	}
	p.setTiming(func(t *vmm.TimingInfo) { t.RestoreRAM, t.RestorePages = st.RAM, st.Pages })
	// Each disk back to the depth below the checkpoint's layer, then a
	// fresh layer, so that the checkpoint can be restored again.
	for j, d := range p.cfg.Disks {
		if err := d.Device.PopTo(p.base[j] + idx); err != nil {
			return p.breakWith(fmt.Errorf("%s: restore %d: disk %s: %w", p.cfg.Backend, r.id, d.Serial, err))
		}
		d.Device.Push()
	}
	p.records = p.records[:idx+1]
	if err := p.assertDepths(); err != nil {
		return p.breakWith(err)
	}
	if err := p.verify(r); err != nil {
		return p.breakWith(err)
	}
	return nil
}

// verify is the gate: RAM and every disk hash as at checkpoint r.
func (p *Path) verify(r record) error {
	if !p.cfg.Verify {
		return nil
	}
	ram, disks, err := p.hashAll()
	if err != nil {
		return fmt.Errorf("%s: restore %d: %w", p.cfg.Backend, r.id, err)
	}
	if ram != r.ram {
		return fmt.Errorf("%s: restore %d: %w: RAM hash %x, checkpoint %x", p.cfg.Backend, r.id, vmm.ErrVerify, ram[:8], r.ram[:8])
	}
	for j := range disks {
		if disks[j] != r.disks[j] {
			return fmt.Errorf("%s: restore %d: %w: disk %s hash %x, checkpoint %x",
				p.cfg.Backend, r.id, vmm.ErrVerify, p.cfg.Disks[j].Serial, disks[j][:8], r.disks[j][:8])
		}
	}
	return nil
}

// Delete removes checkpoint id from anywhere on the path: its disk layers
// and memory delta merge into their neighbours, which stay restorable. The
// guest is stopped meanwhile; the running state is unchanged.
func (p *Path) Delete(ctx context.Context, id vmm.CheckpointID) error {
	idx, err := p.lookup("delete", id)
	if err != nil {
		return err
	}
	if err := p.cfg.Memory.Stop(ctx); err != nil {
		return err
	}
	return p.resume(ctx, p.delete(ctx, idx))
}

func (p *Path) delete(ctx context.Context, idx int) error {
	r := p.records[idx]
	// The layer pushed by checkpoint idx (1-based index base+idx+1) holds
	// the writes after it; folding it into the layer below joins the writes
	// before and after, which is the image of the checkpoints around it.
	for j, d := range p.cfg.Disks {
		if err := d.Device.Merge(p.base[j] + idx + 1); err != nil {
			return p.breakWith(fmt.Errorf("%s: delete %d: disk %s: %w", p.cfg.Backend, r.id, d.Serial, err))
		}
	}
	if err := p.cfg.Memory.Drop(ctx, r.ref); err != nil {
		return p.breakWith(fmt.Errorf("%s: delete %d: %w", p.cfg.Backend, r.id, err))
	}
	p.records = slices.Delete(p.records, idx, idx+1)
	if err := p.assertDepths(); err != nil {
		return p.breakWith(err)
	}
	return nil
}

// resume lets the guest run again after an operation that returned err,
// unless err broke the path (the guest then stays stopped).
func (p *Path) resume(ctx context.Context, err error) error {
	if p.broken != nil {
		return p.broken
	}
	if rerr := p.cfg.Memory.Resume(ctx); rerr != nil && err == nil {
		return rerr
	}
	return err
}

// breakWith marks the path broken by cause and returns the error every
// call returns from now on.
func (p *Path) breakWith(cause error) error {
	p.broken = fmt.Errorf("%w: %w", vmm.ErrBroken, cause)
	return p.broken
}

// lookup is the position of checkpoint id on the path, or the error of op
// on it: the path broke, or id is not on it.
func (p *Path) lookup(op string, id vmm.CheckpointID) (int, error) {
	if p.broken != nil {
		return 0, p.broken
	}
	idx := slices.IndexFunc(p.records, func(r record) bool { return r.id == id })
	if idx < 0 {
		return 0, fmt.Errorf("%s: %s %d: %w", p.cfg.Backend, op, id, vmm.ErrUnknownCheckpoint)
	}
	return idx, nil
}

// assertDepths checks the lockstep invariant: memory depth == overlay
// depth − base == path length.
func (p *Path) assertDepths() error {
	if got := p.cfg.Memory.Depth(); got != len(p.records) {
		return fmt.Errorf("%s: memory depth %d, checkpoint path %d: lockstep broken", p.cfg.Backend, got, len(p.records))
	}
	for j, d := range p.cfg.Disks {
		if got, want := d.Device.Depth(), p.base[j]+len(p.records); got != want {
			return fmt.Errorf("%s: disk %s: overlay depth %d, checkpoint depth %d: lockstep broken", p.cfg.Backend, d.Serial, got, want)
		}
	}
	return nil
}

// hashAll hashes guest RAM and every disk; the guest is stopped.
func (p *Path) hashAll() ([32]byte, [][32]byte, error) {
	ram, err := p.cfg.Memory.RAMHash()
	if err != nil {
		return ram, nil, fmt.Errorf("hash RAM: %w", err)
	}
	disks := make([][32]byte, len(p.cfg.Disks))
	for i, d := range p.cfg.Disks {
		if disks[i], err = d.Device.Hash(); err != nil {
			return ram, nil, fmt.Errorf("hash disk %s: %w", d.Serial, err)
		}
	}
	return ram, disks, nil
}
