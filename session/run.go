package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// RunCallTimeout bounds one agent call or machine operation of a run; past
// it the guest counts as gone (agent silent).
const RunCallTimeout = 2 * time.Minute

// DefaultMaxRunDuration is Config.MaxRunDuration's default.
const DefaultMaxRunDuration = time.Hour

// ErrRunTimeLimit is the cause of a run's context (Run.Context) when the run
// lasted past Config.MaxRunDuration.
var ErrRunTimeLimit = errors.New("run reached the daemon's max run duration")

// ErrRunDeleted is the cause of a run's context when its session was
// deleted while the run lasted (Manager.Delete).
var ErrRunDeleted = errors.New("run cancelled: its session was deleted")

// ErrGuestGone wraps a run's machine error that means the guest cannot be
// used any more: it died, its agent channel broke or went silent past
// RunCallTimeout, its agent sent an impossible response
// (agent.ErrBadResponse), or its machine was closed.
var ErrGuestGone = errors.New("guest gone")

// Run is a lease on one new session's machine for an experiment (an
// explore run, a clock sweep, a profile, a corruption run). Acquire
// creates the session and marks it busy: the other session methods refuse
// it with errkind.ErrState while the run lasts. Every use of the machine goes
// through Do (locked, bounded); End ends the session, once. The run uses
// Context for everything it does, so that it ends when its session is
// deleted or it runs past Config.MaxRunDuration. A Run is used from one
// goroutine (Manager.Delete cancels it from another).
type Run struct {
	m     *Manager
	s     *session
	kind  string
	info  Info
	boot  time.Duration
	specs []guest.LaneSpec
	lanes []string
	ended bool

	ctx    context.Context
	cancel context.CancelCauseFunc // cancels ctx with a cause
	stop   context.CancelFunc      // releases ctx's timer
	done   chan struct{}           // closed when End has ended the session
}

// Acquire creates a session for o (as Create) and leases it to a run of
// the given kind ("explore", "sweep", ...; it prefixes the errors and names
// the run in the busy error). The caller defers Close, runs under
// Context (not ctx), and ends the run with End or Finish when it knows how
// it went.
func (m *Manager) Acquire(ctx context.Context, o CreateOptions, kind string) (*Run, error) {
	t0 := time.Now()
	in, err := m.Create(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	boot := time.Since(t0)
	m.mu.Lock()
	s := m.sessions[in.ID]
	m.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%s: session %s ended before the run started: %w", kind, in.ID, errkind.ErrState)
	}
	s.mu.Lock()
	defer s.unlock()
	if !s.info.State.live() {
		return nil, fmt.Errorf("%s: session %s is %s (%s): %w", kind, in.ID, s.info.State, s.info.Reason, errkind.ErrState)
	}
	s.run = kind
	r := &Run{m: m, s: s, kind: kind, info: *in, boot: boot, specs: slices.Clone(s.specs), done: make(chan struct{})}
	for _, sp := range s.specs {
		r.lanes = append(r.lanes, sp.Name)
	}
	limit := m.cfg.MaxRunDuration
	if limit <= 0 {
		limit = DefaultMaxRunDuration
	}
	cctx, cancel := context.WithCancelCause(ctx)
	r.ctx, r.stop = context.WithTimeoutCause(cctx, limit, fmt.Errorf("%w (%v)", ErrRunTimeLimit, limit))
	r.cancel = cancel
	s.lease.Store(r)
	return r, nil
}

// Context is the run's context: Acquire's, also cancelled with cause
// ErrRunDeleted when the session is deleted and ErrRunTimeLimit when the
// run lasts past Config.MaxRunDuration (context.Cause says which).
func (r *Run) Context() context.Context { return r.ctx }

// cancelRun cancels the run that holds session id, if one does (cause
// ErrRunDeleted), and waits until the run has ended the session or ctx
// ends. leased says whether a run held it.
func (m *Manager) cancelRun(ctx context.Context, id string) (leased bool, err error) {
	m.mu.Lock()
	s := m.sessions[id]
	m.mu.Unlock()
	if s == nil {
		return false, nil
	}
	r := s.lease.Load()
	if r == nil {
		return false, nil
	}
	r.cancel(ErrRunDeleted)
	select {
	case <-r.done:
		return true, nil
	case <-ctx.Done():
		return true, fmt.Errorf("session %s: %s run cancelled, not ended yet: %w", id, r.kind, ctx.Err())
	}
}

// runCause is why the run's context ended when that is more than plain
// cancellation (ErrRunDeleted, ErrRunTimeLimit, a cause the caller gave),
// else nil.
func (r *Run) runCause() error {
	c := context.Cause(r.ctx)
	if c == nil || c == r.ctx.Err() {
		return nil
	}
	return c
}

// ID is the run's session id.
func (r *Run) ID() string { return r.info.ID }

// Backend is the machine backend that booted ("qemu" or "kvm").
func (r *Run) Backend() string { return r.info.Backend }

// Image is the guest image the run's session booted.
func (r *Run) Image() *guest.Ref { return r.info.Image }

// Boot is the time Acquire took to boot the guest and mount the lanes.
func (r *Run) Boot() time.Duration { return r.boot }

// Specs are the session's lane specs, in lane order.
func (r *Run) Specs() []guest.LaneSpec { return slices.Clone(r.specs) }

// Lanes are the session's lane names, in lane order.
func (r *Run) Lanes() []string { return slices.Clone(r.lanes) }

// Do runs f on the session's machine with the session locked and a
// per-call timeout (RunCallTimeout). A dead guest, a broken agent channel,
// a closed machine, a silent agent or an impossible response (f's error
// wrapping agent.ErrBadResponse) wraps ErrGuestGone; a cancelled ctx
// wraps ctx's error only; past RunCallTimeout the session is also marked
// StateUnresponsive; once the session's overlays refused a write (its
// budget), every call wraps errkind.ErrExhausted. A session that ended
// (Manager.Close) is errkind.ErrState.
func (r *Run) Do(ctx context.Context, what string, f func(ctx context.Context, mach vmm.Machine) error) error {
	r.s.mu.Lock()
	defer r.s.unlock()
	if !r.s.info.State.live() || r.s.mach == nil {
		return fmt.Errorf("session %s is %s (%s): %w", r.s.info.ID, r.s.info.State, r.s.info.Reason, errkind.ErrState)
	}
	if refusal := r.s.overBudget(); refusal != nil {
		return fmt.Errorf("%s: %w: %w", what, errkind.ErrExhausted, refusal)
	}
	cctx, cancel := context.WithTimeout(ctx, RunCallTimeout)
	defer cancel()
	err := f(cctx, r.s.mach)
	if refusal := r.s.overBudget(); refusal != nil {
		return fmt.Errorf("%s: %w: %w", what, errkind.ErrExhausted, refusal)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		if r.s.info.State == StateRunning {
			r.s.info.State, r.s.info.Reason = StateUnresponsive, fmt.Sprintf("%s: no answer within %s", what, RunCallTimeout)
		}
		return fmt.Errorf("%s: %w: %w", what, ErrGuestGone, err)
	case errors.Is(err, vmm.ErrGuestDied), errors.Is(err, agent.ErrBroken), errors.Is(err, vmm.ErrClosed),
		errors.Is(err, agent.ErrBadResponse):
		return fmt.Errorf("%s: %w: %w", what, ErrGuestGone, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Call sends one agent request.
func (r *Run) Call(ctx context.Context, what string, req *agentv1.Request) (*agentv1.Response, error) {
	var resp *agentv1.Response
	err := r.Do(ctx, what, func(ctx context.Context, mach vmm.Machine) error {
		var err error
		resp, err = mach.Call(ctx, req)
		return err
	})
	return resp, err
}

// CallOK is Call that also turns a non-zero errno into an error.
func (r *Run) CallOK(ctx context.Context, what string, req *agentv1.Request) (*agentv1.Response, error) {
	resp, err := r.Call(ctx, what, req)
	if err != nil {
		return nil, err
	}
	if err := agent.ResponseError(resp); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return resp, nil
}

// Apply runs one operation (validated as for Manager.Apply) on every lane,
// global ops (sync, drop_caches, set_clock) once, their result given to
// every lane: Step without requests after it. It records no event. A bad
// op is a errkind.FieldError.
func (r *Run) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	res, _, err := r.Step(ctx, op, nil)
	return res, err
}

// MaxStepAfter bounds the requests Step sends after the op.
const MaxStepAfter = 32

// Step applies op as Apply does and then runs the requests in after (the
// fingerprints of the state it made, ...; the run built them: they are not
// validated) in one agent round trip: one Batch. It returns every lane's
// result and after's responses in order. A response the guest left out, or
// a batch it refused, is an error.
func (r *Run) Step(ctx context.Context, op *agentv1.Request, after []*agentv1.Request) ([]LaneResult, []*agentv1.Response, error) {
	kind, _, err := validateOp(op)
	if err != nil {
		return nil, nil, err
	}
	if len(after) > MaxStepAfter {
		return nil, nil, fmt.Errorf("step %s: %d requests after the op: at most %d", kind, len(after), MaxStepAfter)
	}
	var reqs []*agentv1.Request
	if globalOps[kind] {
		reqs = append(reqs, withLane(op, kind, ""))
	} else {
		for _, l := range r.lanes {
			reqs = append(reqs, withLane(op, kind, l))
		}
	}
	nops := len(reqs)
	reqs = append(reqs, after...)
	resp, err := r.CallOK(ctx, "step "+kind, &agentv1.Request{Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: reqs}}})
	if err != nil {
		return nil, nil, err
	}
	got := resp.GetBatch().GetResponses()
	if len(got) != len(reqs) {
		return nil, nil, fmt.Errorf("step %s: %d responses for %d requests", kind, len(got), len(reqs))
	}
	out := make([]LaneResult, 0, len(r.lanes))
	for i, l := range r.lanes {
		lr := LaneResult{Lane: l, Errno: got[min(i, nops-1)].GetErrno()}
		if i < nops {
			lr.Agent = time.Duration(got[i].GetAgentNs())
		}
		out = append(out, lr)
	}
	return out, got[nops:], nil
}

// CallLane sends a lane operation to one lane: a copy of op with its lane
// field set. Unlike Apply it takes any op with a lane field (a profile's
// walk, ...), unvalidated: the run built it.
func (r *Run) CallLane(ctx context.Context, what string, op *agentv1.Request, lane string) (*agentv1.Response, error) {
	m := op.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("op"))
	if fd == nil || fd.Message() == nil || fd.Message().Fields().ByName("lane") == nil {
		return nil, errkind.Invalid("op", "%s: not an operation on a lane", what)
	}
	return r.Call(ctx, what, withLane(op, string(fd.Name()), lane))
}

// withLane returns a copy of op (an operation of the given kind) with its
// id cleared and, unless lane is "" (a global op), its lane field set.
func withLane(op *agentv1.Request, kind, lane string) *agentv1.Request {
	req := proto.Clone(op).(*agentv1.Request)
	req.Id = 0
	if lane == "" {
		return req
	}
	m := req.ProtoReflect()
	sub := m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(kind))).Message()
	sub.Set(sub.Descriptor().Fields().ByName("lane"), protoreflect.ValueOfString(lane))
	return req
}

// Checkpoint checkpoints the machine (no pool, no ledger record). A
// checkpoint whose memory does not fit the session's budget is deleted
// again and the error wraps errkind.ErrExhausted.
func (r *Run) Checkpoint(ctx context.Context, what string) (vmm.CheckpointID, error) {
	var id vmm.CheckpointID
	err := r.Do(ctx, what, func(ctx context.Context, mach vmm.Machine) error {
		var err error
		if id, err = mach.Checkpoint(ctx); err != nil {
			return err
		}
		if err := r.s.syncCheckpointRAM(); err != nil {
			return errors.Join(err, mach.Delete(ctx, id), r.s.syncCheckpointRAM())
		}
		return nil
	})
	return id, err
}

// Restore restores the machine to checkpoint id.
func (r *Run) Restore(ctx context.Context, what string, id vmm.CheckpointID) error {
	return r.Do(ctx, what, func(ctx context.Context, mach vmm.Machine) error {
		if err := mach.Restore(ctx, id); err != nil {
			return err
		}
		r.m.shrinkCheckpointRAM(r.s)
		return nil
	})
}

// Disk runs f on lane i's disk (an overlay lane's upper layer) with the
// session locked.
func (r *Run) Disk(ctx context.Context, i int, what string, f func(d *overlay.Device) error) error {
	return r.Do(ctx, what, func(context.Context, vmm.Machine) error {
		if i < 0 || i >= len(r.s.devs) || r.s.devs[i] == nil {
			return fmt.Errorf("no disk for lane %d", i)
		}
		return f(r.s.devs[i])
	})
}

// Hashes is Manager.Hashes of the run's session: every lane's whole disk
// as written and, where the backend exposes it, all guest RAM.
func (r *Run) Hashes(ctx context.Context) (Hashes, error) {
	var h Hashes
	err := r.Do(ctx, "hashes", func(ctx context.Context, mach vmm.Machine) error {
		var err error
		if h.Disks, err = r.s.diskHashes(); err != nil {
			return err
		}
		hasher, ok := mach.(vmm.Hasher)
		if !ok {
			return nil
		}
		if h.RAM, err = hasher.RAMHash(ctx); err != nil {
			return err
		}
		h.HasRAM = true
		return nil
	})
	return h, err
}

// HasSpare reports whether lane i has a spare disk (CreateOptions.Spares;
// not for an overlay lane).
func (r *Run) HasSpare(i int) bool {
	return i >= 0 && i < len(r.s.spareDevs) && r.s.spareDevs[i] != nil
}

// Spare runs f on lane i's disk and its spare disk (CreateOptions.Spares)
// with the session locked; a lane without a spare is an error.
func (r *Run) Spare(ctx context.Context, i int, what string, f func(lane, spare *overlay.Device) error) error {
	return r.Do(ctx, what, func(context.Context, vmm.Machine) error {
		if i < 0 || i >= len(r.s.spareDevs) || r.s.spareDevs[i] == nil {
			return fmt.Errorf("no spare disk for lane %d", i)
		}
		return f(r.s.devs[i], r.s.spareDevs[i])
	})
}

// Event records an event of the run's session (time filled in); a ledger
// failure is logged. It is recorded even when ctx is cancelled.
func (r *Run) Event(ctx context.Context, kind, detail string, results []LaneResult) {
	r.m.event(ctx, Event{Session: r.info.ID, Kind: kind, Detail: detail, Results: results})
}

// RecordFinding stores a new finding of the run (Session filled in).
func (r *Run) RecordFinding(ctx context.Context, f *Finding) error {
	f.Session = r.info.ID
	if f.Image == nil {
		f.Image = r.info.Image
	}
	return r.m.ledger.insertFinding(context.WithoutCancel(ctx), f)
}

// UpdateFinding stores a recorded finding's new trace and verdict.
func (r *Run) UpdateFinding(ctx context.Context, f *Finding) error {
	return r.m.ledger.updateFinding(context.WithoutCancel(ctx), f)
}

// End ends the run's session with state st and reason (with the cause
// appended when the run's context ended for a reason of its own: "explore
// cancelled (run cancelled: its session was deleted)"); only the first call
// does anything (later calls return nil), so a runner may defer an End as a
// backstop and End with the real reason when it knows it. It cancels the
// run's context.
func (r *Run) End(st State, reason string) error {
	if r.ended {
		return nil
	}
	r.ended = true
	if c := r.runCause(); c != nil {
		reason += " (" + c.Error() + ")"
	}
	defer close(r.done)
	defer r.cancel(nil) // releases ctx: the run is over
	defer r.stop()
	r.s.mu.Lock()
	defer r.s.unlock()
	r.s.run = ""
	r.s.lease.Store(nil)
	return r.m.stop(r.s, st, reason)
}

// Close ends the run if nothing has ended it yet, with reason "<kind>
// failed: ended early"; a failure to end is logged. A runner defers it
// right after Acquire, so that a run always ends, whatever happens in it.
func (r *Run) Close() {
	if r.ended {
		return
	}
	if err := r.End(StateEnded, r.kind+" failed: ended early"); err != nil {
		r.m.log.Warn("end "+r.kind+" session", zap.String("session", r.info.ID), zap.Error(err))
	}
}

// Finish ends the run with a reason from runErr and ctx (the run's
// context): "<kind> finished", "<kind> cancelled" or "<kind> failed: ...".
// It returns runErr wrapped with the session (joined with a failure to
// end); a failure to end a run that itself succeeded is logged, not
// returned: it does not undo the run.
func (r *Run) Finish(ctx context.Context, runErr error) error {
	reason := r.kind + " finished"
	switch {
	case runErr != nil && ctx.Err() != nil:
		reason = r.kind + " cancelled"
		if c := context.Cause(ctx); c != nil && c != ctx.Err() && !errors.Is(runErr, c) {
			runErr = fmt.Errorf("%w: %w", c, runErr)
		}
	case runErr != nil:
		reason = r.kind + " failed: " + runErr.Error()
	}
	endErr := r.End(StateEnded, reason)
	if runErr != nil {
		return errors.Join(fmt.Errorf("%s: session %s: %w", r.kind, r.info.ID, runErr), endErr)
	}
	if endErr != nil {
		r.m.log.Warn("end "+r.kind+" session", zap.String("session", r.info.ID), zap.Error(endErr))
	}
	return nil
}

// Log is the manager's logger, named for the run's session.
func (r *Run) Log() *zap.Logger { return r.m.log.With(zap.String("session", r.info.ID)) }

// article is "a" or "an" before word, with the word.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}
