package crash

import (
	"fmt"
	"slices"
	"strings"

	"github.com/themisfs/themis/overlay"
)

// Defaults and limits of Options.
const (
	DefaultMaxSubset = 2
	DefaultMaxStates = 64
	MaxMaxSubset     = 8
	MaxMaxStates     = 4096
)

// Options bound an enumeration.
type Options struct {
	// MaxSubset is the most writes of one epoch a reordered (non-prefix)
	// state keeps (0: DefaultMaxSubset; at most MaxMaxSubset; -1: none,
	// prefixes only).
	MaxSubset int
	// MaxStates bounds the states in all (0: DefaultMaxStates; at most
	// MaxMaxStates).
	MaxStates int
}

// Kinds of State.
const (
	KindPrefix = "prefix" // the epoch's first writes, in order
	KindSubset = "subset" // some of the epoch's writes, not a prefix
)

// State is one crash state: the log entries (indices of writes) it keeps.
type State struct {
	Keep []int // ascending
	// Flushes is how many flushes completed before the crash: every write
	// before the Flushes-th flush is in Keep.
	Flushes int
	Kind    string
	// Epoch are the indices of the writes of the crash's epoch (the
	// in-flight writes), of which Keep holds those after its durable part.
	Epoch []int
}

// String describes s: "after 1 flush, prefix 2 of writes 4..7".
func (s State) String() string {
	return fmt.Sprintf("after %d flush(es), %s: in-flight writes %s of %s", s.Flushes, s.Kind, ints(s.InFlight()), ints(s.Epoch))
}

// InFlight is the writes of the crash's epoch the state keeps: the end of
// Keep past its durable part.
func (s State) InFlight() []int {
	n := 0
	for _, k := range s.Keep {
		if slices.Contains(s.Epoch, k) {
			n++
		}
	}
	return s.Keep[len(s.Keep)-n:]
}

func ints(v []int) string {
	if len(v) == 0 {
		return "none"
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

// Check validates o and fills its defaults, naming the bad field.
func (o *Options) Check() error {
	switch {
	case o.MaxSubset < -1 || o.MaxSubset > MaxMaxSubset:
		return fmt.Errorf("max subset %d: want -1 (prefixes only) to %d", o.MaxSubset, MaxMaxSubset)
	case o.MaxStates < 0 || o.MaxStates > MaxMaxStates:
		return fmt.Errorf("max states %d: want 1 to %d (0: %d)", o.MaxStates, MaxMaxStates, DefaultMaxStates)
	}
	if o.MaxSubset == 0 {
		o.MaxSubset = DefaultMaxSubset
	}
	if o.MaxStates == 0 {
		o.MaxStates = DefaultMaxStates
	}
	return nil
}

// Epochs splits the log's writes by its flushes: epoch i holds the indices
// of the writes after the i-th flush and before the next; the last is the
// writes after the last flush (possibly none).
func Epochs(log []overlay.LogEntry) [][]int {
	epochs := [][]int{nil}
	for i, e := range log {
		if e.Flush {
			epochs = append(epochs, nil)
			continue
		}
		epochs[len(epochs)-1] = append(epochs[len(epochs)-1], i)
	}
	return epochs
}

// Enumerate lists the crash states of log under o (the model in the
// package doc); truncated reports that MaxStates cut the list short.
func Enumerate(log []overlay.LogEntry, o Options) (states []State, truncated bool, err error) {
	if err := o.Check(); err != nil {
		return nil, false, err
	}
	epochs := Epochs(log)
	full := func() bool {
		if len(states) >= o.MaxStates {
			truncated = true
		}
		return truncated
	}
	var durable []int
	for e, ws := range epochs {
		last := e == len(epochs)-1
		for k := 0; k < len(ws) || (last && k == len(ws)); k++ {
			if full() {
				return states, true, nil
			}
			states = append(states, newState(durable, ws[:k], e, KindPrefix, ws))
		}
		durable = append(durable, ws...)
	}
	durable = nil
	for e, ws := range epochs {
		for size := 1; size <= min(o.MaxSubset, len(ws)); size++ {
			stop := subsets(len(ws), size, func(pick []int) bool {
				if isPrefix(pick) {
					return false
				}
				if full() {
					return true
				}
				kept := make([]int, len(pick))
				for i, p := range pick {
					kept[i] = ws[p]
				}
				states = append(states, newState(durable, kept, e, KindSubset, ws))
				return false
			})
			if stop {
				return states, true, nil
			}
		}
		durable = append(durable, ws...)
	}
	return states, false, nil
}

// newState is the state keeping durable and kept (of epoch e, whose writes
// are epoch).
func newState(durable, kept []int, e int, kind string, epoch []int) State {
	keep := make([]int, 0, len(durable)+len(kept))
	keep = append(append(keep, durable...), kept...)
	return State{Keep: keep, Flushes: e, Kind: kind, Epoch: epoch}
}

// isPrefix reports whether the ascending picks are 0, 1, ..., len-1.
func isPrefix(pick []int) bool {
	for i, p := range pick {
		if p != i {
			return false
		}
	}
	return true
}

// subsets calls f with every size-element subset of 0..n-1 (ascending
// indices, in lexicographic order) until f returns true; it reports
// whether f stopped it.
func subsets(n, size int, f func(pick []int) bool) bool {
	pick := make([]int, size)
	for i := range pick {
		pick[i] = i
	}
	for {
		if f(pick) {
			return true
		}
		i := size - 1
		for i >= 0 && pick[i] == n-size+i {
			i--
		}
		if i < 0 {
			return false
		}
		pick[i]++
		for j := i + 1; j < size; j++ {
			pick[j] = pick[j-1] + 1
		}
	}
}

// StateOf is the state of log that keeps exactly the writes keep (a crash
// finding's, replayed), or an error when keep is not a crash state of log
// under the model: an index out of range or of a flush, or a write kept
// past a flush whose epoch it does not keep whole.
func StateOf(log []overlay.LogEntry, keep []int) (State, error) {
	kept := make(map[int]bool, len(keep))
	for i, k := range keep {
		switch {
		case k < 0 || k >= len(log):
			return State{}, fmt.Errorf("keep[%d] = %d: the log has %d entries", i, k, len(log))
		case log[k].Flush:
			return State{}, fmt.Errorf("keep[%d] = %d: a flush, not a write", i, k)
		case i > 0 && k <= keep[i-1]:
			return State{}, fmt.Errorf("keep[%d] = %d: not ascending", i, k)
		}
		kept[k] = true
	}
	epochs := Epochs(log)
	e := 0
	for e < len(epochs)-1 && keepsAll(kept, epochs[e]) {
		e++
	}
	var durable, inFlight []int
	for _, ws := range epochs[:e] {
		durable = append(durable, ws...)
	}
	for _, w := range epochs[e] {
		if kept[w] {
			inFlight = append(inFlight, w)
		}
	}
	if len(durable)+len(inFlight) != len(keep) {
		return State{}, fmt.Errorf("keeps writes after flush %d, whose epoch it does not keep whole: not a crash state of this log", e)
	}
	kind := KindSubset
	if slices.Equal(inFlight, epochs[e][:len(inFlight)]) {
		kind = KindPrefix
	}
	return newState(durable, inFlight, e, kind, epochs[e]), nil
}

func keepsAll(kept map[int]bool, ws []int) bool {
	for _, w := range ws {
		if !kept[w] {
			return false
		}
	}
	return true
}
