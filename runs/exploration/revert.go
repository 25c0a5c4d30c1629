package exploration

import (
	"context"
	"fmt"
	"strconv"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/overlay"
)

// Revert strategies (Options.Revert): how the search returns to a state.
const (
	// RevertAuto picks per backend (Revert).
	RevertAuto = "auto"
	// RevertMachine restores the whole machine (memory, vCPU, devices and
	// every disk in lockstep): a state is the running guest.
	RevertMachine = "machine"
	// RevertRemount unmounts the lanes, pops each lane's overlay to the
	// state's layer and mounts them again; the machine keeps running (on
	// QEMU/TCG no snapshot-load, so translated code stays warm). A state
	// is its disk image: what survives an unmount. Every op runs on a
	// freshly mounted lane.
	RevertRemount = "remount"
)

// Revert is the strategy auto picks on a backend, and why: remount on
// QEMU, where a machine restore's snapshot-load flushes every translated
// block and the next op and fingerprint run several times slower
// (docs/benchmarks.md), machine on KVM, whose dirty-log restore is tens of
// microseconds against two mounts.
func Revert(backend string) (strategy, why string) {
	if backend == launch.QEMU {
		return RevertRemount, "on QEMU/TCG a machine restore (snapshot-load) flushes all translated code; umount, overlay pop and mount keep it warm"
	}
	return RevertMachine, "on KVM the machine restore (dirty pages, vCPU, devices) costs less than umount and mount"
}

// validRevert checks Options.Revert ("" is auto).
func validRevert(s string) bool {
	switch s {
	case "", RevertAuto, RevertMachine, RevertRemount:
		return true
	}
	return false
}

// diskStack is the remount revert's checkpoints: a stack (the Checker
// restores and drops only the newest it holds), each entry the overlay
// depth of every lane's disk after the layer its checkpoint pushed.
type diskStack struct {
	ids    []explore.CheckpointID
	depths [][]int
	next   int
	// fresh says every lane was mounted since the last op, so the next op
	// runs on a freshly mounted lane as the search's ops did.
	fresh bool
}

// top checks that id is the newest checkpoint held and returns its depths.
func (d *diskStack) top(id explore.CheckpointID) ([]int, error) {
	if n := len(d.ids); n > 0 && d.ids[n-1] == id {
		return d.depths[n-1], nil
	}
	return nil, fmt.Errorf("explore checkpoint %q: not the newest one held (remount revert is a stack)", id)
}

// remountCheckpoint: umount every lane, push a layer on each lane's disk,
// mount again. The state's leaves stay known: it is the state they were
// taken of (a lane that changed across umount+mount is what --remount
// checks).
func (x *system) remountCheckpoint(ctx context.Context) (explore.CheckpointID, error) {
	var depths []int
	err := x.remounted(ctx, func(d *overlay.Device) error {
		depths = append(depths, d.Push())
		return nil
	})
	if err != nil {
		return "", err
	}
	x.disks.next++
	id := "d" + strconv.Itoa(x.disks.next)
	x.disks.ids = append(x.disks.ids, id)
	x.disks.depths = append(x.disks.depths, depths)
	return id, nil
}

// remountRestore: umount every lane, pop each disk to the checkpoint's
// image and push a fresh layer over it (so it can be restored again),
// mount again.
func (x *system) remountRestore(ctx context.Context, id explore.CheckpointID) error {
	depths, err := x.disks.top(id)
	if err != nil {
		return err
	}
	x.forget()
	i := 0
	return x.remounted(ctx, func(d *overlay.Device) error {
		depth := depths[i]
		i++
		if err := d.PopTo(depth - 1); err != nil {
			return err
		}
		d.Push()
		return nil
	})
}

// remountDrop folds the checkpoint's layer into the one below on every
// disk (the image is unchanged; the lanes stay mounted).
func (x *system) remountDrop(ctx context.Context, id explore.CheckpointID) error {
	depths, err := x.disks.top(id)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for i := range x.lanes {
		err := x.run.Disk(ctx, i, "drop checkpoint", func(d *overlay.Device) error { return d.Merge(depths[i]) })
		if err != nil {
			return checked(err)
		}
	}
	x.prof.record(func(p *Profile) { p.Disk += time.Since(t0) })
	n := len(x.disks.ids) - 1
	x.disks.ids, x.disks.depths = x.disks.ids[:n], x.disks.depths[:n]
	return nil
}

// remounted unmounts every lane, runs f on each lane's disk (an overlay
// lane's upper layer; its lower layer is read-only) in lane order, and
// mounts every lane again. f nil only remounts. The caller forgets the
// leaves where the state changes.
func (x *system) remounted(ctx context.Context, f func(d *overlay.Device) error) error {
	t0, io0 := time.Now(), x.diskCounts(ctx)
	var agent time.Duration
	for _, l := range x.lanes {
		resp, err := x.callOK(ctx, "umount "+l, &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: l}}})
		if err != nil {
			return err
		}
		agent += time.Duration(resp.GetAgentNs())
	}
	t1, io1 := time.Now(), x.diskCounts(ctx)
	x.prof.record(func(p *Profile) {
		p.Umount += t1.Sub(t0)
		p.AgentUmount += agent
		p.IOUmount = p.IOUmount.Add(io1.Sub(io0))
	})
	if f != nil {
		for i, l := range x.lanes {
			if err := x.run.Disk(ctx, i, "revert "+l, f); err != nil {
				return checked(err)
			}
		}
	}
	t2, io2 := time.Now(), x.diskCounts(ctx)
	agent = 0
	for _, l := range x.lanes {
		resp, err := x.callOK(ctx, "mount "+l, &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: l}}})
		if err != nil {
			return err
		}
		agent += time.Duration(resp.GetAgentNs())
	}
	t3, io3 := time.Now(), x.diskCounts(ctx)
	x.prof.record(func(p *Profile) {
		p.Disk += t2.Sub(t1)
		p.Mount += t3.Sub(t2)
		p.AgentMount += agent
		p.IOMount = p.IOMount.Add(io3.Sub(io2))
		p.Remounts++
	})
	x.disks.fresh = true
	return nil
}
