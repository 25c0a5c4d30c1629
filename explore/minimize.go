package explore

import (
	"context"
	"errors"
	"fmt"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// ErrBudget is returned (wrapped) by Minimize when its budget of tests ran
// out; the result is then the smallest failing input found so far.
var ErrBudget = errors.New("explore: minimization budget exhausted")

// Minimize shrinks items to a 1-minimal subsequence on which fails still
// holds (Zeller's ddmin): removing any single element of the result makes
// fails false. 1-minimal is not shortest: another, shorter failing
// subsequence may exist. fails is assumed to hold on items and is not called
// on it; the empty sequence is tried first; no candidate is tried twice. budget caps the calls to fails (0: no cap); when it runs out
// Minimize returns the smallest failing candidate so far and an error
// wrapping ErrBudget. An error from fails or ctx stops it at once, returning
// the smallest failing candidate so far with the error.
func Minimize[T any](ctx context.Context, items []T, fails func(ctx context.Context, cand []T) (bool, error), budget int) ([]T, error) {
	calls := 0
	tried := map[string]bool{}
	test := func(idx []int) (bool, error) {
		k := fmt.Sprint(idx)
		if tried[k] {
			return false, nil
		}
		tried[k] = true
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if budget > 0 && calls >= budget {
			return false, fmt.Errorf("%w after %d tests", ErrBudget, calls)
		}
		calls++
		cand := make([]T, len(idx))
		for i, j := range idx {
			cand[i] = items[j]
		}
		return fails(ctx, cand)
	}
	// idx holds the indices into items of the current failing candidate.
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	materialize := func() []T {
		out := make([]T, len(idx))
		for i, j := range idx {
			out[i] = items[j]
		}
		return out
	}
	if len(idx) == 0 {
		return materialize(), nil
	}
	// An empty failing candidate is the best possible.
	if ok, err := test(nil); err != nil {
		return materialize(), err
	} else if ok {
		return []T{}, nil
	}
	n := 2
	for len(idx) >= 2 {
		chunks := split(idx, n)
		reduced := false
		// Try each chunk alone.
		for _, c := range chunks {
			ok, err := test(c)
			if err != nil {
				return materialize(), err
			}
			if ok {
				idx, n, reduced = c, 2, true
				break
			}
		}
		if !reduced {
			// Try each complement.
			for i := range chunks {
				comp := complement(chunks, i)
				ok, err := test(comp)
				if err != nil {
					return materialize(), err
				}
				if ok {
					idx, n, reduced = comp, max(n-1, 2), true
					break
				}
			}
		}
		if !reduced {
			if n >= len(idx) {
				break
			}
			n = min(2*n, len(idx))
		}
	}
	return materialize(), nil
}

// split cuts idx into n nearly equal consecutive chunks.
func split(idx []int, n int) [][]int {
	n = min(n, len(idx))
	out := make([][]int, 0, n)
	start := 0
	for i := range n {
		end := start + (len(idx)-start)/(n-i)
		out = append(out, idx[start:end:end])
		start = end
	}
	return out
}

func complement(chunks [][]int, skip int) []int {
	var out []int
	for i, c := range chunks {
		if i != skip {
			out = append(out, c...)
		}
	}
	return out
}

// Outcome is what replaying a trace gave.
type Outcome struct {
	// Results holds every lane's errno for each op of the trace.
	Results [][]LaneResult
	// States holds every lane's root after the last op.
	States []LaneState
}

// Replay restores root, applies trace op by op and fingerprints the lanes:
// the "same root when replayed from the root" reference, and how Minimize's
// candidates are tried. The System is left in the state trace leads to.
func Replay(ctx context.Context, sys System, root CheckpointID, trace []*agentv1.Request) (*Outcome, error) {
	if err := sys.Restore(ctx, root); err != nil {
		return nil, fmt.Errorf("explore: replay: restore root: %w", err)
	}
	out := &Outcome{Results: make([][]LaneResult, 0, len(trace))}
	for i, op := range trace {
		res, err := sys.Apply(ctx, op)
		if err != nil {
			return out, fmt.Errorf("explore: replay: op %d (%s): %w", i+1, OpKind(op), err)
		}
		out.Results = append(out.Results, res)
	}
	st, err := sys.Fingerprint(ctx)
	if err != nil {
		return out, fmt.Errorf("explore: replay: fingerprint: %w", err)
	}
	out.States = st
	return out, nil
}
