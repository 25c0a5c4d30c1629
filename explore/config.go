package explore

import (
	"context"
	"fmt"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Defaults and limits of Config.
const (
	DefaultDepth          = 2
	MaxDepth              = 10
	DefaultBranching      = 12
	MaxBranching          = 1000
	DefaultProgressEvery  = 64
	DefaultMinimizeBudget = 256
)

// Check is a self-reference run on every new state whose lanes agree (the
// session plugs in remount and fsck for single-lane runs, and lower ⊕ upper
// for every overlay lane). It is called with the System in
// the state trace leads to and must leave it there (or report a finding); a
// nil Finding means the state passed. The Checker fills the Finding's Trace
// and Seed when the check leaves them empty. To minimize a check's finding
// the Checker replays candidate traces from the root and calls the check
// again, so a check must depend only on the System's state and the trace.
type Check func(ctx context.Context, sys System, trace []*agentv1.Request) (*Finding, error)

// Progress is a snapshot of a running search; the caller adds rates and
// timing.
type Progress struct {
	// States counts ops applied by the search (states visited).
	States int
	// Unique counts distinct tuples of lane roots, the root state included.
	Unique int
	// Depth is the depth of the state just visited.
	Depth int
	// MaxDepth is the deepest depth reached so far.
	MaxDepth int
	// Findings counts distinct findings so far.
	Findings int
}

// Config configures a Checker. Zero fields take the defaults.
type Config struct {
	// Depth is the maximum number of ops from the root (1..10, default 2).
	Depth int
	// Branching is the number of ops tried at each state (1..1000,
	// default 12). The Metis generator tries one op of every enabled kind
	// at every state whatever Branching says, so it tries max(Branching,
	// kinds) ops: with the fourteen Metis kinds, 14 at the default; the
	// ops past the kinds are drawn by weight. Narrow Ops for a smaller
	// tree.
	Branching int
	// MaxStates stops the search after that many ops applied (0: no limit).
	MaxStates int
	// Seed drives every random choice.
	Seed uint64

	// Pool, Ops, Weights, MaxLength and Direct configure the default Metis
	// generator; see GenConfig (Ops: the kinds of AllOps, or the sets
	// "metis" and "persistence"; default the Metis set).
	Pool      PathPool
	Ops       []string
	Weights   map[string]float64
	MaxLength int64
	Direct    bool
	// Generator replaces the Metis generator when set (the fields above
	// are then ignored).
	Generator Generator

	// TimeMode is the time mode of the System's fingerprints, used to
	// localize a state divergence in the leaves.
	TimeMode agentv1.TimeMode

	// Checks run on every new state whose lanes agree (root state
	// included).
	Checks []Check
	// Declared are errnos the lanes' filesystems are declared to give
	// (lane → op kind → errno; package family): an op whose lanes
	// disagree only in that some give their declared errno is counted in
	// Result.DeclaredOps, not reported. nil: every disagreement is a
	// finding.
	Declared map[string]map[string]int32
	// ReplaySample is how many states, drawn evenly with the seed, are
	// replayed from the root after the search and compared with the roots
	// the search recorded ("self-reference:replay"). 0: none.
	ReplaySample int
	// MaxFindings stops the search after that many distinct findings
	// (0: no limit; Metis stops at the first).
	MaxFindings int
	// NoMinimize keeps findings' traces as found.
	NoMinimize bool
	// Found is called with every distinct finding the moment the search
	// records it, its Trace as found (Minimized false, ID set). Result
	// and Minimized report it with its canonical trace, which may differ
	// from the one found first (see the package doc, "Workers"). Called
	// under the search's lock, from the worker that found it.
	Found func(Finding)
	// Minimized is called after the search, once per finding Found
	// reported whose kind can be replayed (errno, state, a check's; a
	// kernel finding's with Workers.Replace), as soon as delta debugging is
	// done with it: same ID, Trace shrunk (Minimized true; false with a
	// note in Detail when the trace did not reproduce from the root) and
	// DuplicateOf set when it shrank to an earlier finding's trace. Not
	// called with NoMinimize, nor for a run cancelled or whose guest died
	// (those findings stay as found).
	Minimized func(Finding)
	// LazyRestore skips the restore after an op that failed on every lane
	// and left the abstract state unchanged: the next op runs from the
	// machine as it is. Faster where restores are expensive (TCG flushes
	// its translated code on every restore), at the price of hidden state
	// (caches, negative dentries, atimes outside the time mode) drifting
	// from the checkpoint; the sampled replay from the root still checks
	// that states reproduce. Off by default.
	LazyRestore bool
	// MinimizeBudget caps the replays spent minimizing one finding
	// (default 256).
	MinimizeBudget int

	// Shard makes this run one part of a search split over several runs
	// (Shard.Count > 1); Merge puts the parts together.
	Shard Shard
	// KeepStates fills Result.StateKeys (always on for a shard).
	KeepStates bool

	// Walks, when above 0, makes the search bounded random walks: at the
	// root max(Walks, Branching) ops are drawn as usual (every kind, then
	// weighted draws), and at every other state one op is kept of those
	// drawn there, picked by the state's own random stream. With the
	// visited set each root op leads a walk of up to Depth ops (walks that
	// reach a state another has reached go on as one). Depth then reaches
	// where a full tree cannot (Metis's swarm idea); deterministic by Seed.
	Walks int
	// MountSteps lets a walk go on in the mount its lanes are in: at each
	// state a walk reaches past the root (drawn, by the state's own random
	// stream, half the time) the next op runs with no checkpoint before
	// it, marked keep_mount (SharesMount), and the walk goes on from
	// whatever state it leads to (mountStep). For a System whose Checkpoint
	// and Restore remount the lanes (the remount revert), so that ops
	// which need one mount between them (in-memory state: a page read back
	// from disk, an inode's cached fields) meet in a walk. Only with
	// Walks, and only where no Check remounts the lanes itself.
	MountSteps bool

	// Stop is polled before every op; returning true ends the search with
	// Stopped "stopped" (the caller's wall-clock budget).
	Stop func() bool
	// Progress is called every ProgressEvery states (default 64) and once
	// at the end of the search.
	Progress      func(Progress)
	ProgressEvery int
}

// Shard is one part of a search split over Count runs. Every part
// searches the levels above Depth in full; of the ops tried at the states
// of depth Depth-1 it applies those whose (state, op) hash falls to
// Index, and everything below them. A state's shortest path, and every op
// the whole search applies, lies in some part, so the parts' state sets
// and findings (by signature, the least canonical trace of each) put
// together (Merge) are the whole search's.
type Shard struct {
	Index, Count int
	// Depth is the level whose ops are divided: 1 divides the root's ops
	// (at most as many non-empty parts as the root has ops), 2 the ops of
	// the states one op deep, ... (1..Config.Depth; 0: DefaultShardDepth
	// or Config.Depth when smaller).
	Depth int
}

// DefaultShardDepth is Shard.Depth when unset.
const DefaultShardDepth = 2

// active reports whether the shard divides the search.
func (sh Shard) active() bool { return sh.Count > 1 }

// Resolve checks sh against the search depth and fills its Depth (the
// zero Shard is the whole search).
func (sh Shard) Resolve(depth int) (Shard, error) {
	switch {
	case sh.Count == 0 && sh.Index == 0 && sh.Depth == 0:
		return sh, nil
	case sh.Count < 1 || sh.Count > MaxShards:
		return sh, fmt.Errorf("explore: shard count %d: want 1..%d", sh.Count, MaxShards)
	case sh.Index < 0 || sh.Index >= sh.Count:
		return sh, fmt.Errorf("explore: shard %d of %d: want 0..%d", sh.Index, sh.Count, sh.Count-1)
	case sh.Depth < 0 || sh.Depth > depth:
		return sh, fmt.Errorf("explore: shard depth %d: want 1..%d (the search depth)", sh.Depth, depth)
	case sh.Depth == 0:
		sh.Depth = min(DefaultShardDepth, depth)
	}
	return sh, nil
}

// MaxShards bounds Shard.Count.
const MaxShards = 1 << 16

// withDefaults returns cfg with zero fields set to defaults and checks it.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Depth == 0 {
		cfg.Depth = DefaultDepth
	}
	if cfg.Depth < 1 || cfg.Depth > MaxDepth {
		return cfg, fmt.Errorf("explore: depth %d: want 1..%d", cfg.Depth, MaxDepth)
	}
	if cfg.Branching == 0 {
		cfg.Branching = DefaultBranching
	}
	if cfg.Branching < 1 || cfg.Branching > MaxBranching {
		return cfg, fmt.Errorf("explore: branching %d: want 1..%d", cfg.Branching, MaxBranching)
	}
	if cfg.MaxStates < 0 {
		return cfg, fmt.Errorf("explore: max states %d: want >= 0 (0: no limit)", cfg.MaxStates)
	}
	if cfg.ReplaySample < 0 || cfg.ReplaySample > 1<<20 {
		return cfg, fmt.Errorf("explore: replay sample %d: want 0..%d", cfg.ReplaySample, 1<<20)
	}
	if cfg.MaxFindings < 0 {
		return cfg, fmt.Errorf("explore: max findings %d: want >= 0 (0: no limit)", cfg.MaxFindings)
	}
	if cfg.Walks < 0 || cfg.Walks > MaxBranching {
		return cfg, fmt.Errorf("explore: walks %d: want 0..%d", cfg.Walks, MaxBranching)
	}
	if cfg.MinimizeBudget == 0 {
		cfg.MinimizeBudget = DefaultMinimizeBudget
	}
	if cfg.MinimizeBudget < 0 {
		return cfg, fmt.Errorf("explore: minimize budget %d: want > 0", cfg.MinimizeBudget)
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.ProgressEvery < 0 {
		return cfg, fmt.Errorf("explore: progress interval %d: want > 0", cfg.ProgressEvery)
	}
	sh, err := cfg.Shard.Resolve(cfg.Depth)
	if err != nil {
		return cfg, err
	}
	cfg.Shard = sh
	for i, c := range cfg.Checks {
		if c == nil {
			return cfg, fmt.Errorf("explore: check %d is nil", i)
		}
	}
	if cfg.Generator == nil {
		g, err := NewMetisGenerator(GenConfig{
			Pool: cfg.Pool, Ops: cfg.Ops, Weights: cfg.Weights, MaxLength: cfg.MaxLength, Direct: cfg.Direct,
		})
		if err != nil {
			return cfg, err
		}
		cfg.Generator = g
	}
	return cfg, nil
}
