package explore

import (
	"slices"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Part is what one shard of a search (Config.Shard) contributes to Merge:
// its Result's StateKeys, and its Findings and Duplicates with their
// signatures, canonical traces as found (Found) and minimized traces.
type Part struct {
	StateKeys []string
	// StateDepths are the part's Result.StateDepths: its states' depths,
	// index by index (nil from a shard that did not report them).
	StateDepths []int
	Findings    []PartFinding
	// DeclaredKeys are the part's states judged by a declared difference
	// (Result.DeclaredKeys).
	DeclaredKeys []string
}

// PartFinding is one finding of a part: its Signature (Finding.Signature
// in the part's run) and the finding, whose Found (the canonical trace
// before minimization) and Trace (as minimized) Merge compares.
type PartFinding struct {
	Signature string
	Finding   Finding
}

// Merged is a search put together from its shards: what the whole search
// run at once reports.
type Merged struct {
	Unique    int
	Digest    []byte
	StateKeys []string
	// UniqueByDepth counts the unique states by the shallowest depth any
	// part reached each at (Result.UniqueByDepth of the whole search); nil
	// when a part did not report its depths.
	UniqueByDepth []int
	// DeclaredStates counts the unique states judged by a declared
	// difference, over every part.
	DeclaredStates int
	// Findings are one per signature (the part's whose Found is least),
	// in signature order, without those whose kind and minimized trace an
	// earlier one has (as a run leaves duplicates out).
	Findings []PartFinding
}

// Merge puts the parts of a sharded search together. The parts must be
// of one search (seed, depth, ops, lanes) with every shard present; Merge
// does not check that (the caller compares the parts' configs).
func Merge(parts []Part) Merged {
	keys := map[string]int{} // key -> shallowest depth
	depths := true
	declared := map[string]bool{}
	best := map[string]PartFinding{}
	for _, p := range parts {
		depths = depths && len(p.StateDepths) == len(p.StateKeys)
		for i, k := range p.StateKeys {
			d := 0
			if i < len(p.StateDepths) {
				d = p.StateDepths[i]
			}
			if old, ok := keys[k]; !ok || d < old {
				keys[k] = d
			}
		}
		for _, k := range p.DeclaredKeys {
			declared[k] = true
		}
		for _, f := range p.Findings {
			if b, ok := best[f.Signature]; !ok || traceLess(f.Finding.Found, b.Finding.Found) {
				best[f.Signature] = f
			}
		}
	}
	var m Merged
	for k, d := range keys {
		m.StateKeys = append(m.StateKeys, k)
		if depths {
			m.UniqueByDepth = countAt(m.UniqueByDepth, d)
		}
	}
	slices.Sort(m.StateKeys)
	m.Unique, m.Digest = len(m.StateKeys), Digest(m.StateKeys)
	m.DeclaredStates = len(declared)
	sigs := make([]string, 0, len(best))
	for s := range best {
		sigs = append(sigs, s)
	}
	slices.Sort(sigs)
	seen := map[string]bool{}
	for _, s := range sigs {
		f := best[s]
		k := f.Finding.Kind + "|" + strings.Join(opKeysOf(f.Finding.Trace), "|")
		// As a run: only the kinds that are minimized are deduplicated.
		if f.Finding.Kind != KindReplay && f.Finding.Kind != KindGuestDied {
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		m.Findings = append(m.Findings, f)
	}
	return m
}

func opKeysOf(trace []*agentv1.Request) []string {
	out := make([]string, len(trace))
	for i, op := range trace {
		out[i] = opKey(op)
	}
	return out
}

// sortedSet is a set's members, sorted.
func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
