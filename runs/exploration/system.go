package exploration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// system implements explore.System on a run's machine: no pools, no
// ledger event per op. Every call goes through session.Run.Do, so
// Manager.Close can end the session between two calls (the next call then
// fails with ErrState). It is used only from the goroutine running the
// Checker (its Progress callback included).
type system struct {
	run     *session.Run
	lanes   []string
	overlay map[string]bool // overlay lanes, fingerprinted from below too
	mode    agentv1.TimeMode
	policy  oracle.Policy

	// revert is the strategy (RevertMachine or RevertRemount); ids maps
	// the machine revert's checkpoints, disks holds the remount revert's.
	revert string
	ids    map[string]vmm.CheckpointID
	disks  diskStack
	// leaves and below hold, per lane, the current state's leaves
	// (canonicalized) and an overlay lane's upper layer seen from below
	// (as walked); forget clears them when the state may change. lower
	// holds the overlay lanes' lower layers as walked: they are mounted
	// read-only and never change, so each is walked once.
	leaves, below, lower map[string][]*agentv1.Entry
	raw                  map[string][]*agentv1.Entry // leaves as walked, for LaneState.Exact
	layers               map[string]*layerSeen       // per overlay lane, for LayerCounts

	fsckImage string // scratch file for the fsck check (and --crash's states)

	// maxFile holds, per lane whose family declares one, the largest file
	// size its driver allows (family.Family.MaxFile).
	maxFile map[string]int64

	// kernel is the report of the kernel crash that killed the guest (nil
	// while it lives, or when it died without one).
	kernel *kreport.Report

	// crash is the run's --crash state (nil: off); path is the ops
	// applied since the root, paths the path at each checkpoint held.
	crash *crashRun
	path  []*agentv1.Request
	paths map[explore.CheckpointID][]*agentv1.Request

	t    timers
	prof profiler // Summary.Profile's share
}

// timers are a system's cumulative times: op, fingerprint, restore,
// checkpoint, check. Atomic: progress sums every worker's from whichever
// worker reports.
type timers struct{ op, fp, restore, cp, check atomic.Int64 }

// since adds the time since t0 to d.
func since(d *atomic.Int64, t0 time.Time) { d.Add(int64(time.Since(t0))) }

// sumTimes is the times of systems added up, into out's fields.
func sumTimes(systems []*system) (op, fp, restore, cp, check time.Duration) {
	for _, x := range systems {
		op += time.Duration(x.t.op.Load())
		fp += time.Duration(x.t.fp.Load())
		restore += time.Duration(x.t.restore.Load())
		cp += time.Duration(x.t.cp.Load())
		check += time.Duration(x.t.check.Load())
	}
	return
}

var _ explore.System = (*system)(nil)

func newSystem(run *session.Run, revert string, mode agentv1.TimeMode, policy oracle.Policy) *system {
	x := &system{run: run, lanes: run.Lanes(), overlay: make(map[string]bool), mode: mode, policy: policy, revert: revert,
		disks: diskStack{fresh: true},
		ids:   make(map[string]vmm.CheckpointID), leaves: make(map[string][]*agentv1.Entry),
		below: make(map[string][]*agentv1.Entry), lower: make(map[string][]*agentv1.Entry),
		raw: make(map[string][]*agentv1.Entry), layers: make(map[string]*layerSeen), paths: make(map[explore.CheckpointID][]*agentv1.Request)}
	x.maxFile = make(map[string]int64)
	for _, sp := range run.Specs() {
		x.overlay[sp.Name] = sp.IsOverlay()
		if f, err := family.Of(sp.FS); err == nil && f.MaxFile > 0 {
			x.maxFile[sp.Name] = f.MaxFile
		}
	}
	return x
}

// guestDied is a run error that means the guest is gone
// (session.ErrGuestGone), marked as explore.ErrGuestDied so that the
// Checker records a "guest-died" finding.
type guestDied struct{ error }

func (e guestDied) Is(target error) bool { return target == explore.ErrGuestDied }
func (e guestDied) Unwrap() error        { return e.error }

// checked marks a gone guest's error for explore: an explore.KernelCrash
// when the console the dead guest left (vmm.GuestDiedError) holds a
// kernel report, a guestDied otherwise.
func checked(err error) error {
	if !errors.Is(err, session.ErrGuestGone) {
		return err
	}
	if console, ok := vmm.DeathConsole(err); ok {
		if r, ok := kreport.Parse(console); ok {
			return &explore.KernelCrash{Report: *r, Err: guestDied{err}}
		}
	}
	return guestDied{err}
}

// died notes a kernel crash's report on x (for the replaced session's
// reason) and returns err.
func (x *system) died(err error) error {
	var kc *explore.KernelCrash
	if errors.As(err, &kc) {
		r := kc.Report
		x.kernel = &r
	}
	return err
}

// call sends one agent request.
func (x *system) call(ctx context.Context, what string, req *agentv1.Request) (*agentv1.Response, error) {
	resp, err := x.run.Call(ctx, what, req)
	return resp, x.died(checked(err))
}

// callOK is call that also turns a non-zero errno into an error.
func (x *system) callOK(ctx context.Context, what string, req *agentv1.Request) (*agentv1.Response, error) {
	resp, err := x.run.CallOK(ctx, what, req)
	return resp, x.died(checked(err))
}

// Checkpoint implements explore.System.
func (x *system) Checkpoint(ctx context.Context) (explore.CheckpointID, error) {
	t0 := time.Now()
	defer since(&x.t.cp, t0)
	cp, err := x.checkpoint(ctx)
	if err == nil {
		x.paths[cp] = slices.Clone(x.path)
	}
	return cp, err
}

func (x *system) checkpoint(ctx context.Context) (explore.CheckpointID, error) {
	if x.revert == RevertRemount {
		return x.remountCheckpoint(ctx)
	}
	id, err := x.run.Checkpoint(ctx, "checkpoint")
	if err != nil {
		return "", checked(err)
	}
	cp := strconv.FormatUint(uint64(id), 10)
	x.ids[cp] = id
	return cp, nil
}

func (x *system) vmmID(id explore.CheckpointID) (vmm.CheckpointID, error) {
	v, ok := x.ids[id]
	if !ok {
		return 0, fmt.Errorf("explore checkpoint %q: %w", id, vmm.ErrUnknownCheckpoint)
	}
	return v, nil
}

// Restore implements explore.System.
func (x *system) Restore(ctx context.Context, id explore.CheckpointID) error {
	t0 := time.Now()
	defer since(&x.t.restore, t0)
	x.path = slices.Clone(x.paths[id])
	if x.revert == RevertRemount {
		return x.remountRestore(ctx, id)
	}
	v, err := x.vmmID(id)
	if err != nil {
		return err
	}
	x.forget()
	return checked(x.run.Restore(ctx, "restore", v))
}

// Drop implements explore.System.
func (x *system) Drop(ctx context.Context, id explore.CheckpointID) error {
	t0 := time.Now()
	defer since(&x.t.cp, t0)
	delete(x.paths, id)
	if x.revert == RevertRemount {
		return x.remountDrop(ctx, id)
	}
	v, err := x.vmmID(id)
	if err != nil {
		return err
	}
	err = x.run.Do(ctx, "drop checkpoint", func(ctx context.Context, mach vmm.Machine) error { return mach.Delete(ctx, v) })
	if err != nil {
		return checked(err)
	}
	delete(x.ids, id)
	return nil
}

// Apply implements explore.System: one agent call per lane (global ops —
// sync, drop_caches, set_clock — once, their result given to every lane);
// under --crash a persistence op's crash states are checked too
// (crashApply).
func (x *system) Apply(ctx context.Context, op *agentv1.Request) ([]explore.LaneResult, error) {
	return x.applyOnPath(ctx, op, x.crash != nil && slices.Contains(explore.PersistenceOps, explore.OpKind(op)))
}

// applyOnPath applies op (with crash, checking its crash states:
// crashApply) and adds it to the path from the root.
func (x *system) applyOnPath(ctx context.Context, op *agentv1.Request, crash bool) ([]explore.LaneResult, error) {
	var res []explore.LaneResult
	var err error
	if crash {
		res, err = x.crashApply(ctx, op)
	} else {
		res, err = x.apply(ctx, op)
	}
	if err == nil {
		x.path = append(x.path, op)
	}
	return res, err
}

func (x *system) apply(ctx context.Context, op *agentv1.Request) ([]explore.LaneResult, error) {
	t0 := time.Now()
	defer since(&x.t.op, t0)
	if x.revert == RevertRemount && !x.disks.fresh && !explore.SharesMount(op) {
		// A replay or a lazily skipped restore: the search ran every op
		// on freshly mounted lanes, but those that share the mount of the
		// op before (explore.SharesMount).
		if err := x.remounted(ctx, nil); err != nil {
			return nil, err
		}
	}
	x.disks.fresh = false
	x.forget()
	after, keep := x.fingerprintRequests()
	io0 := x.diskCounts(ctx)
	res, fps, err := x.run.Step(ctx, op, after)
	io := x.diskCounts(ctx).Sub(io0)
	x.prof.record(func(p *Profile) {
		p.IOStep = p.IOStep.Add(io)
		for _, r := range res {
			p.AgentOp += r.Agent
		}
		for _, r := range fps {
			p.AgentWalk += time.Duration(r.GetAgentNs())
		}
	})
	var fe *errkind.FieldError
	if errors.As(err, &fe) {
		return nil, fmt.Errorf("explore op: %w", err)
	}
	if err != nil {
		return nil, x.died(checked(err))
	}
	for i, resp := range fps {
		keep[i](resp)
	}
	return exploreResults(res), nil
}

// Fingerprint implements explore.System: the agent walks each lane (with
// leaves) and the host folds them under the run's policy and time mode (the
// agent's own root is the plain Fold, without the policy).
func (x *system) Fingerprint(ctx context.Context) ([]explore.LaneState, error) {
	t0 := time.Now()
	defer since(&x.t.fp, t0)
	return x.fingerprint(ctx)
}

func (x *system) fingerprint(ctx context.Context) ([]explore.LaneState, error) {
	out := make([]explore.LaneState, 0, len(x.lanes))
	for _, l := range x.lanes {
		leaves, err := x.laneLeaves(ctx, l)
		if err != nil {
			return nil, err
		}
		st := explore.LaneState{Lane: l, Root: oracle.Root(leaves, x.mode)}
		if x.policy != oracle.Exact && len(x.lanes) > 1 {
			st.Exact = oracle.Root(x.raw[l], x.mode)
		}
		if x.overlay[l] {
			b, err := x.belowLeaves(ctx, l)
			if err != nil {
				return nil, err
			}
			st.Below = oracle.Root(oracle.Canonicalize(b, x.policy), x.mode)
		}
		out = append(out, st)
	}
	return out, nil
}

// fingerprintRequests are the fingerprints of every lane (and an overlay
// lane's from below) that Apply sends with the op, in one round trip, and
// for each the function that keeps its leaves for Fingerprint and Leaves.
// A response with an errno (a lane too large for the batch's reply) is
// not kept: Fingerprint asks for it alone.
func (x *system) fingerprintRequests() ([]*agentv1.Request, []func(*agentv1.Response)) {
	var reqs []*agentv1.Request
	var keep []func(*agentv1.Response)
	for _, l := range x.lanes {
		reqs = append(reqs, x.fingerprintReq(l, false))
		keep = append(keep, func(r *agentv1.Response) {
			if r.GetErrno() == 0 {
				x.keep(l, r.GetFingerprint().GetLeaves())
			}
		})
		if x.overlay[l] {
			reqs = append(reqs, x.fingerprintReq(l, true))
			keep = append(keep, func(r *agentv1.Response) {
				if r.GetErrno() == 0 {
					x.below[l] = r.GetFingerprint().GetLeaves()
				}
			})
		}
	}
	return reqs, keep
}

// fingerprintReq is the fingerprint of a lane with leaves (from below: an
// overlay lane's upper layer).
func (x *system) fingerprintReq(lane string, below bool) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: x.mode, Leaves: true, Below: below}}}
}

// forget drops the leaves of the current state (the state may change).
func (x *system) forget() {
	clear(x.leaves)
	clear(x.raw)
	clear(x.below)
}

// keep records a lane's leaves in the current state, as walked and
// canonicalized (the two share the entries the policy leaves alone).
func (x *system) keep(lane string, walked []*agentv1.Entry) []*agentv1.Entry {
	x.raw[lane] = walked
	ls := oracle.Canonicalize(walked, x.policy)
	x.leaves[lane] = ls
	return ls
}

// belowLeaves returns an overlay lane's upper layer seen from below in the
// current state, the markers classified by the agent, as walked.
func (x *system) belowLeaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	if ls, ok := x.below[lane]; ok {
		return ls, nil
	}
	resp, err := x.callOK(ctx, "fingerprint "+lane+" from below", x.fingerprintReq(lane, true))
	x.walked()
	if err != nil {
		return nil, err
	}
	ls := resp.GetFingerprint().GetLeaves()
	x.below[lane] = ls
	return ls, nil
}

// lowerLeaves returns an overlay lane's lower layer as walked (once per
// run: it is mounted read-only).
func (x *system) lowerLeaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	if ls, ok := x.lower[lane]; ok {
		return ls, nil
	}
	req := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: x.mode, Leaves: true, Lower: true}}}
	resp, err := x.callOK(ctx, "fingerprint "+lane+"'s lower layer", req)
	x.walked()
	if err != nil {
		return nil, err
	}
	ls := resp.GetFingerprint().GetLeaves()
	x.lower[lane] = ls
	return ls, nil
}

// laneLeaves returns a lane's canonicalized leaves in the current state.
func (x *system) laneLeaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	if ls, ok := x.leaves[lane]; ok {
		return ls, nil
	}
	resp, err := x.callOK(ctx, "fingerprint "+lane, x.fingerprintReq(lane, false))
	x.walked()
	if err != nil {
		return nil, err
	}
	return x.keep(lane, resp.GetFingerprint().GetLeaves()), nil
}

// walked records a walk of the lanes by an agent call of its own (a
// state's fingerprint not batched with its op: the root's, or one after
// a restore). The walk looks up every entry, so the mount is no longer as
// a remount leaves it: the next op remounts first, as its trace says and
// a replay does (the first op from the root once ran in the mount its
// walk had filled, which no replay could reproduce). The walk batched
// with an op (Step) is the one explore.WalkedBefore says replays make.
func (x *system) walked() { x.disks.fresh = false }

// Leaves implements explore.System.
func (x *system) Leaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	t0 := time.Now()
	defer since(&x.t.fp, t0)
	return x.laneLeaves(ctx, lane)
}

// progressOf converts explore's progress, adding rates and the time split
// of every worker's system.
func progressOf(p explore.Progress, elapsed time.Duration, systems []*system) Progress {
	out := Progress{States: p.States, Unique: p.Unique, Depth: p.MaxDepth, Findings: p.Findings, Elapsed: elapsed}
	out.OpTime, out.FingerprintTime, out.RestoreTime, out.CheckpointTime, out.CheckTime = sumTimes(systems)
	if secs := elapsed.Seconds(); secs > 0 {
		out.StatesPerSec = float64(p.States) / secs
	}
	return out
}
