package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Finding kinds of the session's own self-references (explore.Config.Checks).
const (
	KindRemount = "self-reference:remount"
	KindFsck    = "self-reference:fsck"
	// KindLayers: an overlay lane's merged view is not lower ⊕ upper seen
	// from below (oracle.Merge).
	KindLayers = "self-reference:layers"
)

// Summary.Stopped values besides explore's ("" done, "budget", "cancelled",
// "findings", "guest-died").
const (
	// StopMaxDuration: ExploreOptions.MaxDuration ran out.
	StopMaxDuration = "max-duration"
)

const (
	// exploreProgressEvery is how many states pass between progress calls.
	exploreProgressEvery = 16
	// exploreCallTimeout bounds one agent call or machine operation of an
	// explore run; past it the guest counts as dead (agent silent).
	exploreCallTimeout = 2 * time.Minute
	// defaultPolicy is the canonicalization policy of an explore run.
	defaultPolicy = "metis"
)

// ExploreOptions are the inputs of Explore.
type ExploreOptions struct {
	// Lanes are lane specs, as for Create ("ext2", "ext2,vfat" as two
	// entries, ...). One lane is checked against its own references; two or
	// more against each other.
	Lanes []string
	// MemoryMiB is guest RAM in MiB (default 128).
	MemoryMiB int
	// Backend is the machine backend, as for Create: "" or "auto", "qemu"
	// or "kvm".
	Backend string
	// Depth is the maximum number of ops from the root (1..10, default 2).
	Depth int
	// Branching is the number of ops tried per state (1..1000, default 12).
	Branching int
	// MaxStates stops the run after that many ops applied (0: no limit).
	MaxStates int
	// Seed drives every random choice: the same seed visits the same states.
	Seed uint64
	// TimeMode is the fingerprint time mode (default NONE, Metis parity).
	TimeMode agentv1.TimeMode
	// Policy is the canonicalization policy (oracle.PolicyByName; default "metis").
	Policy string
	// MaxDuration is the wall-clock budget of the search (0: none). Boot and
	// the minimization of findings after the search are not counted.
	MaxDuration time.Duration
	// Fsck runs the host's checker over the lane's resolved overlay image
	// (after a sync in the guest) at every new state: e2fsck -fn for a
	// single ext2/3/4 lane or overlay lane (its upper layer's image),
	// btrfs check --readonly --check-data-csum for a single btrfs lane.
	Fsck bool
	// Remount checks at every new state that umount+mount leaves the lane's
	// fingerprint unchanged. Single lane only.
	Remount bool
	// LazyRestore skips the restore after an op that failed on every lane
	// and left the abstract state unchanged (explore.Config.LazyRestore).
	LazyRestore bool
}

// ExploreProgress is a snapshot of a running Explore.
type ExploreProgress struct {
	// States counts ops applied by the search; Unique the distinct states
	// (the root included).
	States, Unique int
	// Depth is the deepest depth reached so far.
	Depth int
	// Findings counts distinct findings so far (before minimization).
	Findings int
	// Elapsed is the time since the search started (boot excluded).
	Elapsed time.Duration
	// StatesPerSec is States / Elapsed.
	StatesPerSec float64
	// OpTime, FingerprintTime and RestoreTime are the cumulative time spent
	// applying ops, fingerprinting (agent walk + host fold) and restoring
	// checkpoints; CheckpointTime taking and dropping checkpoints; CheckTime
	// running the self-references (remount, fsck). Replays made to minimize
	// findings count too.
	OpTime, FingerprintTime, RestoreTime, CheckpointTime, CheckTime time.Duration
}

// Finding is a property violation found by Explore, as the ledger keeps it.
type Finding struct {
	// ID is "f-<12 hex>".
	ID string
	// Session is the explore run's session.
	Session string
	// Kind is explore's kind ("errno-divergence", "state-divergence",
	// "guest-died", "self-reference:replay") or the session's own
	// (KindRemount, KindFsck).
	Kind string
	// Detail says what differs, in words.
	Detail string
	// Trace is the ops from the root state, in opspec short form
	// (opspec.Parse reads them back); its last op exposed the finding. It
	// is the trace as found until minimization replaces it with the
	// minimized one (Minimized).
	Trace []string
	// FoundTrace is the trace as the search found it.
	FoundTrace []string
	// Lanes holds every lane's errno for the last op of Trace.
	Lanes []LaneResult
	// Path is the first differing path of a state divergence ("" is the lane
	// root) and Field what differs there ("mode", "nlink", "missing", ...).
	Path, Field string
	// Seed is the run's seed.
	Seed uint64
	// Minimized is true once Trace is the result of delta debugging, which
	// runs after the search (a run cancelled or whose guest died keeps its
	// findings as found); OriginalLen is the length of the trace as found.
	Minimized   bool
	OriginalLen int
	// DuplicateOf is the id of an earlier finding of the run whose
	// minimized trace this one's repeats ("" when none); the summary does
	// not count duplicates.
	DuplicateOf string
	// Created is when the finding was recorded.
	Created time.Time
	// LaneSpecs are the run's lane specs, to replay the trace in a new session.
	LaneSpecs []string
}

// ExploreSummary is how far an Explore run got.
type ExploreSummary struct {
	// Session is the session the run created (ended when Explore returns).
	Session string
	// RestoresSkipped counts restores LazyRestore left out.
	RestoresSkipped int
	// States counts ops applied by the search, Unique the distinct states
	// (the root included), Findings the findings recorded but those
	// marked DuplicateOf after minimization.
	States, Unique, Findings int
	// StatesPerSec is States / Elapsed.
	StatesPerSec float64
	// Backend is the machine backend that booted ("qemu" or "kvm").
	Backend string
	// Stopped says why the search ended early: "" (it covered its bounded
	// space), "budget" (MaxStates), StopMaxDuration, "cancelled",
	// "findings" or "guest-died".
	Stopped string
	// Elapsed is the search's wall time, minimization included, boot
	// excluded; Boot is the time to boot the guest and mount the lanes.
	Elapsed, Boot time.Duration
	// MaxDepth is the deepest depth reached.
	MaxDepth int
	// Digest is hex sha256 over the roots of the unique states in the order
	// found: equal digests mean the same sequence of states.
	Digest string
	// Roots are every lane's root (under the run's time mode and policy) at
	// the root state.
	Roots map[string][]byte
	// BelowRoots are the overlay lanes' roots from below (upper layer,
	// markers classified; same time mode and policy) at the root state.
	// The visited set is keyed by Roots only.
	BelowRoots map[string][]byte
	// Layers says, per overlay lane, what the lower ⊕ upper reference
	// (KindLayers) checked.
	Layers map[string]LayerCounts
	// The cumulative time split, as in ExploreProgress.
	OpTime, FingerprintTime, RestoreTime, CheckpointTime, CheckTime time.Duration
}

// LayerCounts is what the lower ⊕ upper reference saw of one overlay lane
// during a run.
type LayerCounts struct {
	// Checked counts the lane's distinct merged states checked (the root
	// state included; a state reached again by a replay counts once).
	Checked int
	// Whiteouts and Opaque count those of them whose upper layer, seen
	// from below, held at least one whiteout, or one opaque directory.
	Whiteouts, Opaque int
}

// validateExplore checks o, fills its defaults and returns the policy.
func validateExplore(o *ExploreOptions) (oracle.Policy, error) {
	co := CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Backend: o.Backend}
	specs, err := validateCreate(&co)
	if err != nil {
		return oracle.Policy{}, err
	}
	o.MemoryMiB, o.Backend = co.MemoryMiB, co.Backend
	switch {
	case o.Depth == 0:
		o.Depth = explore.DefaultDepth
	case o.Depth < 1 || o.Depth > explore.MaxDepth:
		return oracle.Policy{}, Invalid("depth", "%d: want 1..%d", o.Depth, explore.MaxDepth)
	}
	switch {
	case o.Branching == 0:
		o.Branching = explore.DefaultBranching
	case o.Branching < 1 || o.Branching > explore.MaxBranching:
		return oracle.Policy{}, Invalid("branching", "%d: want 1..%d", o.Branching, explore.MaxBranching)
	}
	if o.MaxStates < 0 {
		return oracle.Policy{}, Invalid("max_states", "%d: want >= 0 (0: no limit)", o.MaxStates)
	}
	if o.MaxDuration < 0 {
		return oracle.Policy{}, Invalid("max_duration", "%s: negative", o.MaxDuration)
	}
	if _, ok := agentv1.TimeMode_name[int32(o.TimeMode)]; !ok {
		return oracle.Policy{}, Invalid("time_mode", "unknown time mode %d", o.TimeMode)
	}
	if o.Policy == "" {
		o.Policy = defaultPolicy
	}
	policy, err := oracle.PolicyByName(o.Policy)
	if err != nil {
		return oracle.Policy{}, Invalid("policy", "%v", err)
	}
	for _, c := range []struct {
		on    bool
		field string
	}{{o.Remount, "remount"}, {o.Fsck, "fsck"}} {
		if c.on && len(specs) != 1 {
			return oracle.Policy{}, Invalid(c.field, "a self-reference of single-lane runs; %d lanes are compared with each other", len(specs))
		}
	}
	if o.Fsck {
		// An overlay lane's upper layer is checked.
		tool, err := fsckFor(specs[0].Layer().FS)
		if err != nil {
			return oracle.Policy{}, Invalid("fsck", "lane %s: %v", specs[0].Name, err)
		}
		if err := tool.installed(); err != nil {
			return oracle.Policy{}, Invalid("fsck", "%v", err)
		}
	}
	return policy, nil
}

// Explore creates a session for o.Lanes, explores its state space with
// explore.Checker and ends the session. progress (optional) is called every
// few states and once at the end. found (optional) is called with every
// finding the moment the search finds it, already recorded in the ledger
// with its trace as found (Minimized false), and, for the kinds that can be
// replayed, once more with the same ID after the search, when delta
// debugging is done with it and the ledger holds the minimized trace
// (Minimized true, DuplicateOf set if it shrank to an earlier finding's
// trace). Both calls come from the goroutine running Explore.
//
// A run stopped by a cancelled ctx keeps its findings (as found, not
// minimized) and returns its summary with Stopped "cancelled" and a nil
// error; so does a run whose guest died ("guest-died", the session failed).
// Bad options are a FieldError; other failures return an error and, when
// the run got that far, the partial summary.
//
// The session is busy while the run lasts: the other session methods refuse
// it with ErrState. It ends with reason "explore finished", "explore
// cancelled", ...
func (m *Manager) Explore(ctx context.Context, o ExploreOptions, progress func(ExploreProgress), found func(Finding)) (*ExploreSummary, error) {
	policy, err := validateExplore(&o)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	in, err := m.Create(ctx, CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Backend: o.Backend})
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	boot := time.Since(t0)
	m.mu.Lock()
	s := m.sessions[in.ID]
	m.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("explore: session %s ended before the run started: %w", in.ID, ErrState)
	}
	s.mu.Lock()
	if s.info.State != StateRunning {
		s.mu.Unlock()
		return nil, fmt.Errorf("explore: session %s is %s (%s): %w", in.ID, s.info.State, s.info.Reason, ErrState)
	}
	s.exploring = true
	lanes := make([]string, len(s.specs))
	overlays := make(map[string]bool)
	for i, sp := range s.specs {
		lanes[i] = sp.Name
		overlays[sp.Name] = sp.IsOverlay()
	}
	s.mu.Unlock()

	sys := &exploreSys{m: m, s: s, lanes: lanes, overlay: overlays, mode: o.TimeMode, policy: policy,
		ids: make(map[string]vmm.CheckpointID), leaves: make(map[string][]*agentv1.Entry),
		below: make(map[string][]*agentv1.Entry), lower: make(map[string][]*agentv1.Entry),
		layers: make(map[string]*layerSeen)}
	// Findings are kept whatever happens to the run.
	bg := context.WithoutCancel(ctx)
	rec := &findingRecorder{m: m, ctx: bg, session: in.ID, specs: o.Lanes, send: found, byID: make(map[int]*Finding)}
	cfg := explore.Config{
		Depth: o.Depth, Branching: o.Branching, MaxStates: o.MaxStates, Seed: o.Seed,
		TimeMode: o.TimeMode, ProgressEvery: exploreProgressEvery, LazyRestore: o.LazyRestore,
		Found: rec.found, Minimized: rec.minimized,
	}
	if o.Remount {
		cfg.Checks = append(cfg.Checks, sys.remountCheck)
	}
	if o.Fsck {
		dir, err := os.MkdirTemp("", "themis-fsck-")
		if err != nil {
			return nil, errors.Join(fmt.Errorf("explore: fsck scratch dir: %w", err), m.endExplore(s, StateEnded, "explore failed: fsck scratch dir"))
		}
		defer os.RemoveAll(dir)
		sys.fsckImage = filepath.Join(dir, "lane.img")
		cfg.Checks = append(cfg.Checks, sys.fsckCheck)
	}
	for _, l := range lanes {
		if overlays[l] {
			cfg.Checks = append(cfg.Checks, sys.layersCheck(l))
		}
	}
	start := time.Now()
	if o.MaxDuration > 0 {
		cfg.Stop = func() bool { return time.Since(start) >= o.MaxDuration }
	}
	if progress != nil {
		cfg.Progress = func(p explore.Progress) { progress(sys.progress(p, time.Since(start))) }
	}
	m.event(ctx, Event{Session: in.ID, Kind: "explore.started", Detail: fmt.Sprintf(
		"depth %d, branching %d, max states %d, seed %d, time mode %s, policy %s, remount %v, fsck %v",
		o.Depth, o.Branching, o.MaxStates, o.Seed, o.TimeMode, policy.Name, o.Remount, o.Fsck)})

	chk, err := explore.NewChecker(sys, cfg)
	if err != nil { // validateExplore let through what explore refuses
		return nil, errors.Join(fmt.Errorf("explore: %w", err), m.endExplore(s, StateEnded, "explore failed: "+err.Error()))
	}
	res, runErr := chk.Run(ctx)
	elapsed := time.Since(start)

	sum := &ExploreSummary{
		Session: in.ID, States: res.States, Unique: res.Unique, Backend: in.Backend,
		Stopped: res.Stopped, Elapsed: elapsed, Boot: boot, MaxDepth: res.MaxDepthReached,
		Digest: hex.EncodeToString(res.Digest), Roots: make(map[string][]byte, len(res.Root)),
		OpTime: sys.opTime, FingerprintTime: sys.fpTime, RestoreTime: sys.restoreTime,
		CheckpointTime: sys.cpTime, CheckTime: sys.checkTime, RestoresSkipped: res.RestoresSkipped,
	}
	if sum.Stopped == explore.StopRequested {
		sum.Stopped = StopMaxDuration
	}
	if secs := elapsed.Seconds(); secs > 0 {
		sum.StatesPerSec = float64(res.States) / secs
	}
	for l, seen := range sys.layers {
		if sum.Layers == nil {
			sum.Layers = make(map[string]LayerCounts)
		}
		sum.Layers[l] = seen.counts
	}
	for _, r := range res.Root {
		sum.Roots[r.Lane] = r.Root
		if r.Below != nil {
			if sum.BelowRoots == nil {
				sum.BelowRoots = make(map[string][]byte)
			}
			sum.BelowRoots[r.Lane] = r.Below
		}
	}

	errs := rec.errs
	sum.Findings = rec.distinct()

	st, reason := StateEnded, "explore finished"
	switch {
	case runErr != nil:
		reason = "explore failed: " + runErr.Error()
		errs = append([]error{fmt.Errorf("explore: session %s: %w", in.ID, runErr)}, errs...)
	case res.Stopped == explore.StopCancelled:
		reason = "explore cancelled"
	case res.Stopped == explore.StopGuestDied:
		st, reason = StateFailed, "explore: guest died"
	case res.Stopped != "":
		reason = "explore finished (stopped: " + sum.Stopped + ")"
	}
	m.event(bg, Event{Session: in.ID, Kind: "explore.finished", Detail: fmt.Sprintf(
		"%d states, %d unique, %d findings, %.1f states/s, stopped %q", sum.States, sum.Unique, sum.Findings, sum.StatesPerSec, sum.Stopped)})
	if err := m.endExplore(s, st, reason); err != nil {
		if len(errs) == 0 {
			// The run itself is complete; a failure to stop its guest does
			// not undo it.
			m.log.Warn("end explore session", zap.String("session", in.ID), zap.Error(err))
		} else {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return sum, errors.Join(errs...)
	}
	return sum, nil
}

// endExplore ends an explore run's session.
func (m *Manager) endExplore(s *session, st State, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exploring = false
	return m.stop(s, st, reason)
}

// findingRecorder stores an Explore run's findings in the ledger as
// explore reports them (explore.Config.Found, then Minimized) and passes
// each stored version to the caller. It is used only from the goroutine
// running the Checker.
type findingRecorder struct {
	m       *Manager
	ctx     context.Context // not cancelled with the run: findings are kept
	session string
	specs   []string
	send    func(Finding) // the caller's found; may be nil

	byID map[int]*Finding // by explore's Finding.ID
	errs []error          // ledger failures, returned at the end of the run
}

// found records a finding the moment the search finds it, trace as found.
func (r *findingRecorder) found(f explore.Finding) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		r.errs = append(r.errs, fmt.Errorf("finding id: %w", err))
		return
	}
	trace := FormatTrace(f.Trace)
	fd := &Finding{
		ID: "f-" + hex.EncodeToString(b[:]), Session: r.session, Kind: f.Kind, Detail: f.Detail,
		Trace: trace, FoundTrace: slices.Clone(trace), Path: f.Path, Field: f.Field, Seed: f.Seed,
		Minimized: f.Minimized, OriginalLen: f.OriginalLen, Created: time.Now().UTC(),
		LaneSpecs: slices.Clone(r.specs), Lanes: laneResults(f.Lanes),
	}
	if err := r.m.ledger.insertFinding(r.ctx, fd); err != nil {
		r.errs = append(r.errs, err)
		return
	}
	r.byID[f.ID] = fd
	r.m.event(r.ctx, Event{Session: r.session, Kind: "finding", Detail: fmt.Sprintf("%s %s: %s", fd.ID, fd.Kind, fd.Detail), Results: fd.Lanes})
	r.emit(fd)
}

// minimized updates a recorded finding with its minimized trace.
func (r *findingRecorder) minimized(f explore.Finding) {
	fd := r.byID[f.ID]
	if fd == nil {
		return // its first record failed (already in errs)
	}
	fd.Detail, fd.Trace, fd.Path, fd.Field, fd.Lanes = f.Detail, FormatTrace(f.Trace), f.Path, f.Field, laneResults(f.Lanes)
	fd.Minimized, fd.DuplicateOf = f.Minimized, ""
	if dup := r.byID[f.DuplicateOf]; f.DuplicateOf != 0 && dup != nil {
		fd.DuplicateOf = dup.ID
	}
	if err := r.m.ledger.updateFinding(r.ctx, fd); err != nil {
		r.errs = append(r.errs, err)
		return
	}
	detail := fmt.Sprintf("%s: %d ops as found, %d minimized", fd.ID, fd.OriginalLen, len(fd.Trace))
	switch {
	case !fd.Minimized:
		detail = fmt.Sprintf("%s: not minimized: %s", fd.ID, fd.Detail)
	case fd.DuplicateOf != "":
		detail += ", duplicate of " + fd.DuplicateOf
	}
	r.m.event(r.ctx, Event{Session: r.session, Kind: "finding.minimized", Detail: detail, Results: fd.Lanes})
	r.emit(fd)
}

func (r *findingRecorder) emit(fd *Finding) {
	if r.send != nil {
		c := *fd
		c.Trace, c.FoundTrace, c.Lanes, c.LaneSpecs = slices.Clone(fd.Trace), slices.Clone(fd.FoundTrace), slices.Clone(fd.Lanes), slices.Clone(fd.LaneSpecs)
		r.send(c)
	}
}

// distinct counts the recorded findings that are not duplicates.
func (r *findingRecorder) distinct() int {
	n := 0
	for _, fd := range r.byID {
		if fd.DuplicateOf == "" {
			n++
		}
	}
	return n
}

func laneResults(ls []explore.LaneResult) []LaneResult {
	var out []LaneResult
	for _, l := range ls {
		out = append(out, LaneResult{Lane: l.Lane, Errno: l.Errno})
	}
	return out
}

// FormatTrace writes ops in opspec short form (protojson where the short
// form cannot say it exactly).
func FormatTrace(trace []*agentv1.Request) []string {
	out := make([]string, len(trace))
	for i, r := range trace {
		op, err := opspec.FromRequest(r)
		if err != nil {
			b, merr := protojson.Marshal(r)
			if merr != nil {
				out[i] = fmt.Sprintf("<unprintable op: %v>", err)
				continue
			}
			out[i] = string(b)
			continue
		}
		out[i] = opspec.Format(op)
	}
	return out
}

// Findings lists the findings of one session ("" = every session), oldest
// first. An unknown session is ErrNotFound.
func (m *Manager) Findings(ctx context.Context, sessionID string) ([]Finding, error) {
	if sessionID != "" {
		if _, err := m.ledger.session(ctx, sessionID); err != nil {
			return nil, err
		}
	}
	return m.ledger.findings(ctx, sessionID)
}

// Finding returns one finding by id; an unknown id is ErrNotFound.
func (m *Manager) Finding(ctx context.Context, id string) (*Finding, error) {
	if id == "" {
		return nil, Invalid("finding_id", "required")
	}
	return m.ledger.finding(ctx, id)
}

// exploreSys implements explore.System directly on a session's machine: no
// pools, no ledger event per op. Every call takes s.mu for its duration, so
// Manager.Close can end the session between two calls (the next call then
// fails with ErrState). All fields below s are used only from the goroutine
// running the Checker (its Progress callback included).
type exploreSys struct {
	m       *Manager
	s       *session
	lanes   []string
	overlay map[string]bool // overlay lanes, fingerprinted from below too
	mode    agentv1.TimeMode
	policy  oracle.Policy

	ids map[string]vmm.CheckpointID
	// leaves and below hold, per lane, the current state's leaves
	// (canonicalized) and an overlay lane's upper layer seen from below
	// (as walked); forget clears them when the state may change. lower
	// holds the overlay lanes' lower layers as walked: they are mounted
	// read-only and never change, so each is walked once.
	leaves, below, lower map[string][]*agentv1.Entry
	layers               map[string]*layerSeen // per overlay lane, for LayerCounts

	fsckImage string // scratch file for the fsck check

	opTime, fpTime, restoreTime, cpTime, checkTime time.Duration
}

var _ explore.System = (*exploreSys)(nil)

// machine runs f on the session's machine with s.mu held and a per-call
// timeout. A dead guest, a broken agent channel or a silent agent wraps
// explore.ErrGuestDied; a cancelled ctx wraps ctx's error only.
func (x *exploreSys) machine(ctx context.Context, what string, f func(ctx context.Context, mach vmm.Machine) error) error {
	x.s.mu.Lock()
	defer x.s.mu.Unlock()
	if x.s.info.State != StateRunning || x.s.mach == nil {
		return fmt.Errorf("session %s is %s (%s): %w", x.s.info.ID, x.s.info.State, x.s.info.Reason, ErrState)
	}
	cctx, cancel := context.WithTimeout(ctx, exploreCallTimeout)
	defer cancel()
	err := f(cctx, x.s.mach)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case errors.Is(err, vmm.ErrGuestDied), errors.Is(err, agent.ErrBroken), errors.Is(err, vmm.ErrClosed),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %w", what, explore.ErrGuestDied, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// call sends one agent request.
func (x *exploreSys) call(ctx context.Context, what string, req *agentv1.Request) (*agentv1.Response, error) {
	var resp *agentv1.Response
	err := x.machine(ctx, what, func(ctx context.Context, mach vmm.Machine) error {
		var err error
		resp, err = mach.Call(ctx, req)
		return err
	})
	return resp, err
}

// callOK is call that also turns a non-zero errno into an error.
func (x *exploreSys) callOK(ctx context.Context, what string, req *agentv1.Request) (*agentv1.Response, error) {
	resp, err := x.call(ctx, what, req)
	if err != nil {
		return nil, err
	}
	if err := agent.ResponseError(resp); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return resp, nil
}

// Checkpoint implements explore.System.
func (x *exploreSys) Checkpoint(ctx context.Context) (explore.CheckpointID, error) {
	t0 := time.Now()
	defer func() { x.cpTime += time.Since(t0) }()
	var id vmm.CheckpointID
	err := x.machine(ctx, "checkpoint", func(ctx context.Context, mach vmm.Machine) error {
		var err error
		id, err = mach.Checkpoint(ctx)
		return err
	})
	if err != nil {
		return "", err
	}
	cp := strconv.FormatUint(uint64(id), 10)
	x.ids[cp] = id
	return cp, nil
}

func (x *exploreSys) vmmID(id explore.CheckpointID) (vmm.CheckpointID, error) {
	v, ok := x.ids[id]
	if !ok {
		return 0, fmt.Errorf("explore checkpoint %q: %w", id, vmm.ErrUnknownCheckpoint)
	}
	return v, nil
}

// Restore implements explore.System.
func (x *exploreSys) Restore(ctx context.Context, id explore.CheckpointID) error {
	t0 := time.Now()
	defer func() { x.restoreTime += time.Since(t0) }()
	v, err := x.vmmID(id)
	if err != nil {
		return err
	}
	x.forget()
	return x.machine(ctx, "restore", func(ctx context.Context, mach vmm.Machine) error { return mach.Restore(ctx, v) })
}

// Drop implements explore.System.
func (x *exploreSys) Drop(ctx context.Context, id explore.CheckpointID) error {
	t0 := time.Now()
	defer func() { x.cpTime += time.Since(t0) }()
	v, err := x.vmmID(id)
	if err != nil {
		return err
	}
	if err := x.machine(ctx, "drop checkpoint", func(ctx context.Context, mach vmm.Machine) error { return mach.Delete(ctx, v) }); err != nil {
		return err
	}
	delete(x.ids, id)
	return nil
}

// Apply implements explore.System: one agent call per lane (global ops —
// sync, drop_caches, set_clock — once, their result given to every lane).
func (x *exploreSys) Apply(ctx context.Context, op *agentv1.Request) ([]explore.LaneResult, error) {
	t0 := time.Now()
	defer func() { x.opTime += time.Since(t0) }()
	return x.apply(ctx, op)
}

func (x *exploreSys) apply(ctx context.Context, op *agentv1.Request) ([]explore.LaneResult, error) {
	kind, _, err := validateOp(op)
	if err != nil {
		return nil, fmt.Errorf("explore op: %w", err)
	}
	x.forget()
	out := make([]explore.LaneResult, 0, len(x.lanes))
	if globalOps[kind] {
		req := proto.Clone(op).(*agentv1.Request)
		resp, err := x.call(ctx, kind, req)
		if err != nil {
			return nil, err
		}
		for _, l := range x.lanes {
			out = append(out, explore.LaneResult{Lane: l, Errno: resp.GetErrno()})
		}
		return out, nil
	}
	for _, l := range x.lanes {
		resp, err := x.call(ctx, kind+" on "+l, withLane(op, kind, l))
		if err != nil {
			return nil, err
		}
		out = append(out, explore.LaneResult{Lane: l, Errno: resp.GetErrno()})
	}
	return out, nil
}

// withLane returns a copy of op (a lane operation of the given kind) with
// its lane field set.
func withLane(op *agentv1.Request, kind, lane string) *agentv1.Request {
	req := proto.Clone(op).(*agentv1.Request)
	req.Id = 0
	r := req.ProtoReflect()
	sub := r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(kind))).Message()
	sub.Set(sub.Descriptor().Fields().ByName("lane"), protoreflect.ValueOfString(lane))
	return req
}

// Fingerprint implements explore.System: the agent walks each lane (with
// leaves) and the host folds them under the run's policy and time mode (the
// agent's own root is the plain Fold, without the policy).
func (x *exploreSys) Fingerprint(ctx context.Context) ([]explore.LaneState, error) {
	t0 := time.Now()
	defer func() { x.fpTime += time.Since(t0) }()
	return x.fingerprint(ctx)
}

func (x *exploreSys) fingerprint(ctx context.Context) ([]explore.LaneState, error) {
	out := make([]explore.LaneState, 0, len(x.lanes))
	for _, l := range x.lanes {
		leaves, err := x.laneLeaves(ctx, l)
		if err != nil {
			return nil, err
		}
		st := explore.LaneState{Lane: l, Root: rootOf(leaves, x.mode)}
		if x.overlay[l] {
			b, err := x.belowLeaves(ctx, l)
			if err != nil {
				return nil, err
			}
			st.Below = rootOf(oracle.Canonicalize(b, x.policy), x.mode)
		}
		out = append(out, st)
	}
	return out, nil
}

// forget drops the leaves of the current state (the state may change).
func (x *exploreSys) forget() {
	clear(x.leaves)
	clear(x.below)
}

// belowLeaves returns an overlay lane's upper layer seen from below in the
// current state, the markers classified by the agent, as walked.
func (x *exploreSys) belowLeaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	if ls, ok := x.below[lane]; ok {
		return ls, nil
	}
	req := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: x.mode, Leaves: true, Below: true}}}
	resp, err := x.callOK(ctx, "fingerprint "+lane+" from below", req)
	if err != nil {
		return nil, err
	}
	ls := resp.GetFingerprint().GetLeaves()
	x.below[lane] = ls
	return ls, nil
}

// lowerLeaves returns an overlay lane's lower layer as walked (once per
// run: it is mounted read-only).
func (x *exploreSys) lowerLeaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	if ls, ok := x.lower[lane]; ok {
		return ls, nil
	}
	req := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: x.mode, Leaves: true, Lower: true}}}
	resp, err := x.callOK(ctx, "fingerprint "+lane+"'s lower layer", req)
	if err != nil {
		return nil, err
	}
	ls := resp.GetFingerprint().GetLeaves()
	x.lower[lane] = ls
	return ls, nil
}

// laneLeaves returns a lane's canonicalized leaves in the current state.
func (x *exploreSys) laneLeaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	if ls, ok := x.leaves[lane]; ok {
		return ls, nil
	}
	req := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: x.mode, Leaves: true}}}
	resp, err := x.callOK(ctx, "fingerprint "+lane, req)
	if err != nil {
		return nil, err
	}
	ls := oracle.Canonicalize(resp.GetFingerprint().GetLeaves(), x.policy)
	x.leaves[lane] = ls
	return ls, nil
}

// Leaves implements explore.System.
func (x *exploreSys) Leaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	t0 := time.Now()
	defer func() { x.fpTime += time.Since(t0) }()
	return x.laneLeaves(ctx, lane)
}

// progress converts explore's progress, adding rates and the time split.
func (x *exploreSys) progress(p explore.Progress, elapsed time.Duration) ExploreProgress {
	out := ExploreProgress{States: p.States, Unique: p.Unique, Depth: p.MaxDepth, Findings: p.Findings,
		Elapsed: elapsed, OpTime: x.opTime, FingerprintTime: x.fpTime, RestoreTime: x.restoreTime,
		CheckpointTime: x.cpTime, CheckTime: x.checkTime}
	if secs := elapsed.Seconds(); secs > 0 {
		out.StatesPerSec = float64(p.States) / secs
	}
	return out
}

// remountCheck is the "state unchanged by umount+mount" self-reference of a
// single-lane run.
func (x *exploreSys) remountCheck(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
	t0 := time.Now()
	defer func() { x.checkTime += time.Since(t0) }()
	lane := x.lanes[0]
	before, err := x.laneLeaves(ctx, lane)
	if err != nil {
		return nil, err
	}
	x.forget()
	for _, req := range []*agentv1.Request{
		{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: lane}}},
		{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane}}},
	} {
		what := strings.TrimPrefix(fmt.Sprintf("%T", req.GetOp()), "*agentv1.Request_")
		resp, err := x.call(ctx, strings.ToLower(what)+" "+lane, req)
		if err != nil {
			return nil, err
		}
		if resp.GetErrno() != 0 {
			return &explore.Finding{Kind: KindRemount, Field: strings.ToLower(what),
				Detail: fmt.Sprintf("%s of lane %s failed: errno %d (%s)", strings.ToLower(what), lane, resp.GetErrno(), resp.GetError())}, nil
		}
	}
	after, err := x.laneLeaves(ctx, lane)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(rootOf(before, x.mode), rootOf(after, x.mode)) {
		return nil, nil
	}
	path, ok := oracle.FirstDiff(before, after, x.mode)
	if !ok {
		return nil, nil
	}
	field, va, vb := explore.FieldDiff(findEntry(before, path), findEntry(after, path), x.mode)
	shown := path
	if shown == "" {
		shown = "/"
	}
	return &explore.Finding{Kind: KindRemount, Path: path, Field: field,
		Detail: fmt.Sprintf("lane %s changed across umount+mount at %s: %s %s before, %s after", lane, shown, field, va, vb)}, nil
}

// layerSeen is the lower ⊕ upper reference's record of one overlay lane.
type layerSeen struct {
	states map[string]bool // merged roots checked
	counts LayerCounts
}

// layersCheck returns the lower ⊕ upper self-reference of an overlay lane:
// the merged view (the lane's walk) must equal oracle.Merge of its lower
// layer and its upper layer seen from below, as walked; both sides are
// canonicalized under the run's policy and compared under its time mode — every field a leaf has,
// the nlink of merged directories included (overlayfs reports 1 for them,
// and Merge says so). It costs no walk of its own: the merged view and the
// view from below are the state's fingerprint walks, and the lower layer is
// walked once per run.
func (x *exploreSys) layersCheck(lane string) explore.Check {
	return func(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
		t0 := time.Now()
		defer func() { x.checkTime += time.Since(t0) }()
		below, err := x.belowLeaves(ctx, lane)
		if err != nil {
			return nil, err
		}
		got, err := x.laneLeaves(ctx, lane) // the merged view, canonicalized
		if err != nil {
			return nil, err
		}
		lower, err := x.lowerLeaves(ctx, lane)
		if err != nil {
			return nil, err
		}
		x.countLayers(lane, rootOf(got, x.mode), below)
		want := oracle.WithoutSymlinkAtime(oracle.Canonicalize(oracle.Merge(lower, below), x.policy))
		got = oracle.WithoutSymlinkAtime(got)
		path, ok := oracle.FirstDiff(want, got, x.mode)
		if !ok {
			return nil, nil
		}
		field, vw, vg := explore.FieldDiff(findEntry(want, path), findEntry(got, path), x.mode)
		shown := path
		if shown == "" {
			shown = "/"
		}
		return &explore.Finding{Kind: KindLayers, Path: path, Field: field,
			Detail: fmt.Sprintf("lane %s: the merged view differs from lower ⊕ upper seen from below at %s: %s %s in lower ⊕ upper, %s merged (policy %s)", lane, shown, field, vw, vg, x.policy.Name)}, nil
	}
}

// countLayers records a checked state of an overlay lane (once per merged
// root) and the markers its upper layer holds.
func (x *exploreSys) countLayers(lane string, root []byte, below []*agentv1.Entry) {
	seen := x.layers[lane]
	if seen == nil {
		seen = &layerSeen{states: make(map[string]bool)}
		x.layers[lane] = seen
	}
	if seen.states[string(root)] {
		return
	}
	seen.states[string(root)] = true
	seen.counts.Checked++
	var wh, op bool
	for _, e := range below {
		switch oracle.ParseSymbolic(e).Marker {
		case oracle.MarkerWhiteout:
			wh = true
		case oracle.MarkerOpaque:
			op = true
		}
	}
	if wh {
		seen.counts.Whiteouts++
	}
	if op {
		seen.counts.Opaque++
	}
}

func rootOf(leaves []*agentv1.Entry, mode agentv1.TimeMode) []byte {
	r := oracle.Fold(leaves, mode)
	return r[:]
}

func findEntry(entries []*agentv1.Entry, path string) *agentv1.Entry {
	for _, e := range entries {
		if e.GetPath() == path {
			return e
		}
	}
	return nil
}

// maxFsckOutput caps the checker output quoted in a finding.
const maxFsckOutput = 2048

// fsckCheck is the "host fsck clean" self-reference of a single ext*,
// overlay or btrfs lane (fsckFor): sync in the guest, write the lane's
// resolved overlay image to a scratch file and check it on the host. The
// image is of a mounted filesystem after sync; ext2 writes its superblock
// and group counters on sync, and btrfs commits its transaction, so it is
// clean unless the filesystem is not.
func (x *exploreSys) fsckCheck(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
	t0 := time.Now()
	defer func() { x.checkTime += time.Since(t0) }()
	if _, err := x.callOK(ctx, "sync", &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}); err != nil {
		return nil, err
	}
	f, err := os.Create(x.fsckImage)
	if err != nil {
		return nil, fmt.Errorf("fsck: %w", err)
	}
	err = x.machine(ctx, "fsck image", func(context.Context, vmm.Machine) error {
		if len(x.s.devs) == 0 {
			return errors.New("no lane device")
		}
		_, err := x.s.devs[0].WriteTo(f)
		return err
	})
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("fsck image: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	tool, err := fsckFor(x.s.specs[0].Layer().FS)
	if err != nil {
		return nil, fmt.Errorf("fsck: %w", err)
	}
	verdict, out, err := tool.run(ctx, x.fsckImage)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fsck: %w", err)
	case verdict == fsckClean:
		return nil, nil
	case verdict == fsckBroken:
		return nil, fmt.Errorf("fsck: %s could not check lane %s's image: %s", tool.Name, x.lanes[0], truncate(out, maxFsckOutput))
	}
	return &explore.Finding{Kind: KindFsck, Field: "fsck",
		Detail: fmt.Sprintf("%s on lane %s's image reports errors: %s", tool.Name, x.lanes[0], truncate(out, maxFsckOutput))}, nil
}

func truncate(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
