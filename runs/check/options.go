package check

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
)

// Part kinds, in the order a check runs them.
const (
	KindClock        = "clock"
	KindDifferential = "differential"
	KindReference    = "reference"
	KindCrash        = "crash"
)

// Kinds are every part kind, in the order a check runs them.
var Kinds = []string{KindClock, KindDifferential, KindReference, KindCrash}

// Defaults and bounds of Options.
const (
	DefaultBudget = 10 * time.Minute
	MaxBudget     = 7 * 24 * time.Hour
	MinBudget     = 10 * time.Second
	DefaultDepth  = 2
	// NoReference is Options.Reference for a single-lane check without
	// the differential.
	NoReference = "none"
)

// Options are the inputs of Run.
type Options struct {
	// Lanes are the lanes under test, as for session.CreateOptions.
	Lanes []string
	// Reference is the lane added for the differential: "" adds
	// family.Reference's when one lane is given (none otherwise),
	// NoReference none, anything else is a lane spec added.
	Reference string
	// Image, Backend and MemoryMiB are every part's sessions'
	// (session.CreateOptions).
	Image, Backend string
	MemoryMiB      int
	// Budget is the wall-clock time of the parts' searches (default
	// DefaultBudget; MinBudget..MaxBudget).
	Budget time.Duration
	// Depth is the explore parts' full tree's depth (default DefaultDepth;
	// random walks go deeper after it).
	Depth int
	// Seed drives every random choice of the explore parts.
	Seed uint64
	// Workers is each explore part's (exploration.Options.Workers; 0:
	// auto).
	Workers int
	// Kinds are the part kinds to run (default Kinds).
	Kinds []string
	// Parallel is how many parts run at once (0: auto, sideBySide; 1:
	// one after another; at most MaxParallel). With Workers 0 and more
	// than one part at once, each explore part has one guest.
	Parallel int
}

// plan is a validated check: the lanes under test, the reference, and the
// parts in order.
type plan struct {
	lanes        []guest.LaneSpec
	reference    string
	referenceWhy string
	parts        []Part
}

// Validate checks o as Run will, without changing it: the API's edge
// calls it so that a bad request is refused before its stream starts. The
// error is errkind.ErrInvalid naming the field.
func Validate(o Options) error {
	_, err := validate(&o)
	return err
}

// validate checks o, fills its defaults and plans the parts.
func validate(o *Options) (*plan, error) {
	co := session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Backend: o.Backend}
	specs, err := session.ValidateCreate(&co)
	if err != nil {
		return nil, err
	}
	o.MemoryMiB, o.Backend = co.MemoryMiB, co.Backend
	switch {
	case o.Budget == 0:
		o.Budget = DefaultBudget
	case o.Budget < MinBudget || o.Budget > MaxBudget:
		return nil, errkind.Invalid("budget", "%s: want %s..%s", o.Budget, MinBudget, MaxBudget)
	}
	switch {
	case o.Depth == 0:
		o.Depth = DefaultDepth
	case o.Depth < 1 || o.Depth > explore.MaxDepth:
		return nil, errkind.Invalid("depth", "%d: want 1..%d (0 for the default %d)", o.Depth, explore.MaxDepth, DefaultDepth)
	}
	if o.Workers < 0 || o.Workers > exploration.MaxWorkers {
		return nil, errkind.Invalid("workers", "%d: want 0 (auto) up to %d", o.Workers, exploration.MaxWorkers)
	}
	if o.Parallel < 0 || o.Parallel > MaxParallel {
		return nil, errkind.Invalid("parallel", "%d: want 0 (auto) up to %d", o.Parallel, MaxParallel)
	}
	if len(o.Kinds) == 0 {
		o.Kinds = Kinds
	}
	for i, k := range o.Kinds {
		if !slices.Contains(Kinds, k) {
			return nil, errkind.Invalid(fmt.Sprintf("parts[%d]", i), "%q: want one of %s", k, strings.Join(Kinds, ", "))
		}
	}
	p := &plan{lanes: specs}
	if err := p.chooseReference(o.Reference); err != nil {
		return nil, err
	}
	p.parts = planParts(o.Kinds, specs, o.Lanes, p.reference)
	return p, nil
}

// chooseReference resolves Options.Reference.
func (p *plan) chooseReference(asked string) error {
	switch {
	case asked == NoReference:
		return nil
	case asked == "" && len(p.lanes) > 1:
		return nil
	case asked == "":
		ref, why, err := family.Reference(p.lanes[0].FS)
		if err != nil {
			return errkind.Invalid("lanes[0]", "%v", err)
		}
		p.reference, p.referenceWhy = ref, why
		return nil
	}
	sp, err := guest.ParseLaneSpec(asked)
	if err != nil {
		return errkind.Invalid("reference", "%v", err)
	}
	for _, l := range p.lanes {
		if l.Name == sp.Name {
			return errkind.Invalid("reference", "%q is a lane under test already", asked)
		}
	}
	p.reference, p.referenceWhy = asked, "asked"
	return nil
}
