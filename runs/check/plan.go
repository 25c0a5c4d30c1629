package check

import (
	"fmt"
	"strings"
	"time"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/runs/exploration"
)

// Budget shares: the clock part takes at most clockShare of the budget;
// the explore parts share what is left by weight.
const (
	clockShare         = 0.25
	weightDifferential = 3
	weightReference    = 2
	weightCrash        = 2
)

// Part is one run of a check: planned (Kind, Lanes, What; Skipped when it
// does not apply), then run (the rest).
type Part struct {
	Kind string
	// Lanes are the lane specs the part's sessions have.
	Lanes []string
	// What says what the part checks, in words.
	What string
	// Skipped says why the part did not run ("": it ran, or will).
	Skipped string
	// Budget is the time the part was given; Elapsed what it took (boot
	// and minimization included).
	Budget, Elapsed time.Duration
	// Findings counts the part's findings: the explore run's, or the
	// sweep's cells against the rule (Cells).
	Findings int
	// Stopped says why the part ended early ("": it covered its bounded
	// space; exploration.Summary.Stopped, or "budget" for the sweep).
	Stopped string
	// Err is how the part failed (the check goes on with the next part).
	Err string
	// Explore is an explore part's summary (its last run's: Depth says
	// how deep that was: the full tree's, then the walks');
	// Sweep and Cells the clock part's (Cells: those whose verdict is not
	// the rule's).
	Explore *exploration.Summary
	Depth   int
	// Walks counts the rounds of random walks that followed the full
	// tree (its last run's summary is Explore's).
	Walks int
	// SetupFailed says which op of the populated root failed on which
	// lane (the filesystem refused an ordinary op): the part's runs then
	// all start from the empty root.
	SetupFailed string
	// UnconfirmedHangs counts, over all the part's runs, hung task
	// reports that did not recur in a fresh guest: not findings.
	UnconfirmedHangs int
	// Sessions are every session an explore part's runs used, in order.
	Sessions []string
	Sweep    *clocksweep.Summary
	Cells    []clocksweep.Cell

	weight int
	fsck   bool
}

// Name is the part's name in reports: its kind and lanes.
func (p *Part) Name() string { return p.Kind + " " + strings.Join(p.Lanes, ",") }

// planParts lays the parts out in the order they run.
// raw are the lane specs as given (lanes parsed).
func planParts(kinds []string, lanes []guest.LaneSpec, raw []string, reference string) []Part {
	var out []Part
	on := make(map[string]bool, len(kinds))
	for _, k := range kinds {
		on[k] = true
	}
	if on[KindClock] {
		out = append(out, clockPart(lanes, raw))
	}
	if on[KindDifferential] {
		out = append(out, differentialPart(raw, reference))
	}
	if on[KindReference] {
		for i, l := range lanes {
			name, noChecker := checker(l)
			what := "the state survives umount+mount"
			if noChecker == nil {
				what += ", and " + name + " finds the image clean"
			}
			out = append(out, Part{Kind: KindReference, Lanes: []string{raw[i]}, What: what, weight: weightReference, fsck: noChecker == nil})
		}
	}
	if on[KindCrash] {
		for i, l := range lanes {
			p := Part{Kind: KindCrash, Lanes: []string{raw[i]}, weight: weightCrash,
				What: "the crash states of every persistence op are clean and keep what it made durable"}
			if name, err := checker(l); err != nil {
				p.Skipped = fmt.Sprintf("lane %s has no host checker: %v", l.Name, err)
			} else {
				p.What += " (" + name + ")"
			}
			out = append(out, p)
		}
	}
	return out
}

func clockPart(lanes []guest.LaneSpec, raw []string) Part {
	p := Part{Kind: KindClock, What: "every adversarial time value stored as the lane's clock rule says"}
	var without []string
	for i, l := range lanes {
		if err := clocksweep.Supports(l); err != nil {
			without = append(without, l.Name)
			continue
		}
		p.Lanes = append(p.Lanes, raw[i])
	}
	if len(p.Lanes) == 0 {
		p.Skipped = "no lane has clock rules: " + strings.Join(without, ", ")
	}
	return p
}

func differentialPart(raw []string, reference string) Part {
	p := Part{Kind: KindDifferential, weight: weightDifferential, What: "the lanes agree on every state and errno (the families' declared differences aside)",
		Lanes: append([]string(nil), raw...)}
	if reference != "" {
		p.Lanes = append(p.Lanes, reference)
		p.What += "; " + reference + " is the reference"
	}
	if len(p.Lanes) < 2 {
		p.Skipped = "one lane and no reference lane"
	}
	return p
}

// checker is the host checker of lane l (its layer's, for an overlay
// lane), or why there is none on this host.
func checker(l guest.LaneSpec) (string, error) {
	t, err := hostfsck.For(l.Layer().FS)
	if err != nil {
		return "", err
	}
	if err := t.Installed(); err != nil {
		return "", err
	}
	return t.Name, nil
}
