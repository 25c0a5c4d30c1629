package exploration

import (
	"slices"
	"strings"
	"time"

	"github.com/themisfs/themis/api"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/session"
)

// Finding kinds of the run's own self-references (explore.Config.Checks).
const (
	KindRemount = api.KindRemount
	KindFsck    = api.KindFsck
	// KindLayers: an overlay lane's merged view is not lower ⊕ upper seen
	// from below (oracle.Merge).
	KindLayers = api.KindLayers
	// KindUnreadable: a lane's filesystem refused to read an entry of its
	// own tree (every run checks it).
	KindUnreadable = api.KindUnreadable
	// KindSizeLimit: a lane holds a file larger than its filesystem's
	// family allows (family.Family.MaxFile; every run checks it).
	KindSizeLimit = api.KindSizeLimit
	// KindSeekAnswer: a lane's filesystem answered lseek SEEK_DATA or
	// SEEK_HOLE with an offset lseek(2) rules out (the walk's
	// Entry.seek_error; every run checks it).
	KindSeekAnswer = api.KindSeekAnswer
)

// Summary.Stopped values besides explore's ("" done, "budget", "cancelled",
// "findings", "guest-died").
const (
	// StopMaxDuration: Options.MaxDuration ran out.
	StopMaxDuration = "max-duration"
	// StopMaxRunDuration: the daemon's cap on every run
	// (session.Config.MaxRunDuration) ran out.
	StopMaxRunDuration = "max-run-duration"
)

const (
	// exploreProgressEvery is how many states pass between progress calls.
	exploreProgressEvery = 16
	// defaultPolicy is the canonicalization policy of an explore run:
	// picked from the lanes' families (family.Judge).
	defaultPolicy = family.AutoPolicy
)

// Options are the inputs of Run.
type Options struct {
	// Lanes are lane specs, as for session.CreateOptions ("ext2", "ext2,vfat" as two
	// entries, ...). One lane is checked against its own references; two or
	// more against each other.
	Lanes []string
	// MemoryMiB is guest RAM in MiB (default 128).
	MemoryMiB int
	// Image is the guest image every worker boots
	// (session.CreateOptions.Image; "": the lanes' flavour's).
	Image string
	// Backend is the machine backend, as for session.CreateOptions: "" or "auto", "qemu"
	// or "kvm".
	Backend string
	// Depth is the maximum number of ops from the root (1..10, default 2).
	Depth int
	// Branching is the number of ops tried per state (1..1000, default
	// 12), and at least one of every enabled op kind: max(Branching,
	// kinds) in all (explore.Config.Branching).
	Branching int
	// Ops are the op kinds tried at every state (explore.AllOps, or the
	// sets "metis" and "persistence"; default the Metis set).
	Ops []string
	// MaxStates stops the run after that many ops applied (0: no limit).
	MaxStates int
	// Seed drives every random choice: the same seed visits the same states.
	Seed uint64
	// TimeMode is the fingerprint time mode (default NONE, Metis parity).
	TimeMode agentv1.TimeMode
	// Policy is the canonicalization policy: "auto" (the default: Metis's
	// rules and every difference the lanes' families declare,
	// family.Judge), "exact" (none, and no op rule either) or another
	// oracle.PolicyByName.
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
	// Revert is how the search returns to a state: RevertMachine,
	// RevertRemount, or "" / RevertAuto for the backend's (Revert).
	Revert string
	// Workers is how many guests explore the one search, each in a
	// session of its own (0: auto, AutoWorkerCount; never
	// more than the session manager has room for; at most MaxWorkers).
	// The unique states, digest and findings do not depend on it
	// (explore.NewParallelChecker).
	Workers int
	// Shard makes the run one part of a search divided among several
	// (explore.Shard; Count 0: the whole search): its Summary carries
	// StateKeys, and explore.Merge of every part's is the whole search.
	Shard explore.Shard
	// WarnNotFinding lets the guest kernel go on after a WARN
	// (session.CreateOptions.WarnNotFatal). By default a WARN ends the
	// guest as an Oops does, and the op is a "kernel" finding.
	WarnNotFinding bool
	// Walks, when above 0, makes the search bounded random walks
	// (explore.Config.Walks): Walks ops at the root, then one op that
	// leads to a new state at every state, to Depth. Under the remount
	// revert, without Remount and Fsck, the walks also take mount steps
	// (explore.Config.MountSteps): half their steps run in the mount of
	// the step before.
	Walks int
	// Crash, when set, checks the crash states of every persistence op
	// the search applies (CrashOptions); the op kinds default to the Metis
	// set and the persistence ops then.
	Crash *CrashOptions
	// Setup are ops applied on every lane of every worker before the
	// search's root (each must succeed on every lane): the root is the
	// state they make, so the search starts from a populated tree, and
	// every finding's trace starts with them (a replay in a fresh session
	// makes the same tree). Metis and persistence op kinds (setupKinds),
	// at most MaxSetup; under Crash a setup op has no crash states.
	Setup []*agentv1.Request
}

// MaxSetup bounds Options.Setup.
const MaxSetup = 64

// Progress is a snapshot of a running exploration.
type Progress struct {
	// Session is the run's session (worker 0's first, as Summary.Session).
	Session string `json:",omitempty"`
	// States counts ops applied by the search; Unique the distinct states
	// (the root included).
	States, Unique int
	// Depth is the deepest depth reached so far.
	Depth int
	// Findings counts distinct findings so far (before minimization),
	// --crash's findings included.
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

// Summary is how far an exploration got.
type Summary struct {
	// Session is the run's session (worker 0's first; ended when Run
	// returns): it holds the run's events and findings. Sessions are every
	// session the run used, Session first (a replaced worker's included).
	Session  string
	Sessions []string
	// Workers is how many workers ran the search, and WorkersWhy why that
	// many ("asked", "auto: 2 CPUs", "asked 4, room for 2 sessions").
	Workers    int
	WorkersWhy string
	// Shard is the part of the search the run was (Count 0: all of it),
	// its Depth resolved; StateKeys are its unique states' root tuples,
	// sorted (a shard's only).
	Shard       explore.Shard
	StateKeys   []string
	StateDepths []int
	// Revert is the revert strategy the run used (auto resolved).
	Revert string
	// RestoresSkipped counts restores LazyRestore left out.
	RestoresSkipped int
	// UnconfirmedHangs counts hung task reports whose hang did not recur
	// when replayed in a fresh guest (explore.Result): not findings.
	UnconfirmedHangs int
	// States counts ops applied by the search, Unique the distinct states
	// (the root included), Findings the findings recorded but those
	// marked DuplicateOf after minimization.
	States, Unique, Findings int
	// StatesPerSec is States / Elapsed.
	StatesPerSec float64
	// Backend is the machine backend that booted ("qemu" or "kvm").
	Backend string
	// Image is the guest image the run's session booted.
	Image *guest.Ref
	// Stopped says why the search ended early: "" (it covered its bounded
	// space), "budget" (MaxStates), StopMaxDuration, "cancelled",
	// "findings" or "guest-died".
	Stopped string
	// Elapsed is the search's wall time, minimization included, boot
	// excluded; Boot is the time to boot the guest and mount the lanes.
	Elapsed, Boot time.Duration
	// MaxDepth is the deepest depth reached; UniqueByDepth counts the
	// unique states by the shallowest depth the run reached each at.
	MaxDepth      int
	UniqueByDepth []int
	// Digest is hex sha256 over the sorted root tuples of the unique
	// states: equal digests mean the same set of states.
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
	// Policy is the canonicalization the run used and Judged its rules
	// with the families that declared them (family.Judgement.String);
	// OpsLeftOut are the op kinds a lane's family does not support that
	// the run did not generate. DeclaredOps counts ops whose errno
	// difference a family declares, DeclaredStates unique states equal
	// only under the canonicalization (explore.Result).
	Policy                      string
	Judged                      string
	OpsLeftOut                  []string
	DeclaredOps, DeclaredStates int
	// DeclaredKeys are a shard's declared states' root tuples, sorted
	// (a shard's only), for the merge.
	DeclaredKeys []string
	// The cumulative time split, as in Progress.
	OpTime, FingerprintTime, RestoreTime, CheckpointTime, CheckTime time.Duration
	// Profile splits those times further (the remount revert's parts,
	// the agent's own time) and counts the disks' requests: for bench
	// explore.
	Profile Profile
	// Crash is what --crash checked (nil without it); its findings are
	// in Findings too.
	Crash *CrashCounts
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

// Validate checks o as Run will, without changing it: the API's edge
// calls it so that a bad request is refused before its stream starts. The
// error is errkind.ErrInvalid naming the field.
func Validate(o Options) error {
	_, err := validate(&o)
	return err
}

// validate checks o, fills its defaults and returns how the run is
// judged (family.Judge of its lanes and policy).
func validate(o *Options) (family.Judgement, error) {
	co := session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Backend: o.Backend}
	specs, err := session.ValidateCreate(&co)
	if err != nil {
		return family.Judgement{}, err
	}
	o.MemoryMiB, o.Backend = co.MemoryMiB, co.Backend
	if err := validateCrash(o, laneFS(specs)); err != nil {
		return family.Judgement{}, err
	}
	switch {
	case o.Depth == 0:
		o.Depth = explore.DefaultDepth
	case o.Depth < 1 || o.Depth > explore.MaxDepth:
		return family.Judgement{}, errkind.Invalid("depth", "%d: want 1..%d", o.Depth, explore.MaxDepth)
	}
	switch {
	case o.Branching == 0:
		o.Branching = explore.DefaultBranching
	case o.Branching < 1 || o.Branching > explore.MaxBranching:
		return family.Judgement{}, errkind.Invalid("branching", "%d: want 1..%d", o.Branching, explore.MaxBranching)
	}
	if !validRevert(o.Revert) {
		return family.Judgement{}, errkind.Invalid("revert", "%q: want auto, machine or remount", o.Revert)
	}
	if o.Walks < 0 || o.Walks > explore.MaxBranching {
		return family.Judgement{}, errkind.Invalid("walks", "%d: want 0..%d (0: the full tree)", o.Walks, explore.MaxBranching)
	}
	if o.MaxStates < 0 {
		return family.Judgement{}, errkind.Invalid("max_states", "%d: want >= 0 (0: no limit)", o.MaxStates)
	}
	if _, err := o.Shard.Resolve(o.Depth); err != nil {
		return family.Judgement{}, errkind.Invalid("shard", "%v", err)
	}
	if o.Workers < 0 || o.Workers > MaxWorkers {
		return family.Judgement{}, errkind.Invalid("workers", "%d: want 0 (auto) up to %d", o.Workers, MaxWorkers)
	}
	if _, err := explore.NewMetisGenerator(explore.GenConfig{Ops: o.Ops}); err != nil {
		return family.Judgement{}, errkind.Invalid("ops", "%v", err)
	}
	if err := validSetup(o.Setup); err != nil {
		return family.Judgement{}, err
	}
	if o.MaxDuration < 0 {
		return family.Judgement{}, errkind.Invalid("max_duration", "%s: negative", o.MaxDuration)
	}
	if _, ok := agentv1.TimeMode_name[int32(o.TimeMode)]; !ok {
		return family.Judgement{}, errkind.Invalid("time_mode", "unknown time mode %d", o.TimeMode)
	}
	if o.Policy == "" {
		o.Policy = defaultPolicy
	}
	lanes := make([]family.Lane, len(specs))
	for i, sp := range specs {
		lanes[i] = family.Lane{Name: sp.Name, FS: sp.FS, Seeded: sp.Seed() != 0}
	}
	judged, err := family.Judge(lanes, o.Policy)
	if err != nil {
		return family.Judgement{}, errkind.Invalid("policy", "%v", err)
	}
	if len(judged.Excluded) > 0 {
		g, err := explore.NewMetisGenerator(explore.GenConfig{Ops: o.Ops})
		if err != nil {
			return family.Judgement{}, errkind.Invalid("ops", "%v", err)
		}
		// Only the kinds the run would generate are left out (and said so).
		judged.Excluded = slices.DeleteFunc(judged.Excluded, func(k string) bool { return !slices.Contains(g.Kinds(), k) })
		if len(judged.Excluded) == 0 {
			judged.Excluded = nil // none: as a run whose lanes exclude nothing
		}
		if o.Ops = family.Without(g.Kinds(), judged.Excluded); len(o.Ops) == 0 {
			return family.Judgement{}, errkind.Invalid("ops", "every op kind asked is one a lane's filesystem does not support (%s); --policy exact compares them anyway", strings.Join(judged.Excluded, ", "))
		}
	}
	for _, c := range []struct {
		on    bool
		field string
	}{{o.Remount, "remount"}, {o.Fsck, "fsck"}} {
		if c.on && len(specs) != 1 {
			return family.Judgement{}, errkind.Invalid(c.field, "a self-reference of single-lane runs; %d lanes are compared with each other", len(specs))
		}
	}
	if o.Fsck {
		// An overlay lane's upper layer is checked.
		tool, err := hostfsck.For(specs[0].Layer().FS)
		if err != nil {
			return family.Judgement{}, errkind.Invalid("fsck", "lane %s: %v", specs[0].Name, err)
		}
		if err := tool.Installed(); err != nil {
			return family.Judgement{}, errkind.Invalid("fsck", "%v", err)
		}
	}
	return judged, nil
}

// setupKinds are the op kinds Options.Setup may hold: Metis's and the
// persistence ops (a sync makes the root durable; under --crash a setup's
// op has no crash states). No burst or far size: the root is a plain
// tree.
var setupKinds = slices.Concat(explore.MetisOps, explore.PersistenceOps)

// validSetup checks Options.Setup: at most MaxSetup ops, each of
// setupKinds.
func validSetup(ops []*agentv1.Request) error {
	if len(ops) > MaxSetup {
		return errkind.Invalid("setup", "%d ops: want at most %d", len(ops), MaxSetup)
	}
	for i, op := range ops {
		if op == nil || op.GetOp() == nil {
			return errkind.Invalid("setup", "op %d: empty", i+1)
		}
		if k := explore.OpKind(op); !slices.Contains(setupKinds, k) {
			return errkind.Invalid("setup", "op %d: kind %s: want one of %s", i+1, k, strings.Join(setupKinds, ", "))
		}
	}
	return nil
}
