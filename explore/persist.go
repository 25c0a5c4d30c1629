package explore

import (
	"math/rand/v2"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"google.golang.org/protobuf/proto"
)

// changedBias is the probability that a persistence op (fsync, fdatasync)
// of a state-aware draw takes a path that the ops since the run's root
// made or changed, when there is one: ACE (CrashMonkey's workload
// generator) persists the files and directories its core ops touched,
// since that is where a filesystem's fsync has something to write. The
// rest are drawn as every other op's path, so that persisting what is
// already durable (and error paths) stay explored. The root's own ops
// (a durable setup) count as unchanged.
const changedBias = 0.5

// rootState keeps the entries of the first state DrawAt sees, the run's
// root (the search draws its root's ops before any other), by path.
func (g *MetisGenerator) rootState(state []*agentv1.Entry) map[string]*agentv1.Entry {
	if g.root == nil {
		g.root = make(map[string]*agentv1.Entry, len(state))
		for _, e := range state {
			g.root[e.GetPath()] = e
		}
	}
	return g.root
}

// changedSince are the paths of state that root does not hold or holds
// otherwise (any field but the access time), in state's order; the root
// directory ("") aside.
func changedSince(root map[string]*agentv1.Entry, state []*agentv1.Entry) []string {
	var out []string
	for _, e := range state {
		if e.GetPath() == "" {
			continue
		}
		if r, ok := root[e.GetPath()]; !ok || entryChanged(r, e) {
			out = append(out, e.GetPath())
		}
	}
	return out
}

// entryChanged reports whether a and b differ in anything but the access
// time and the walk's seek note: FieldDiff's fields with the mtime, and
// the ctime (a setxattr changes nothing else).
func entryChanged(a, b *agentv1.Entry) bool {
	field, _, _ := FieldDiff(a, b, agentv1.TimeMode_TIME_MODE_MTIME)
	return field != "" || !proto.Equal(a.GetCtime(), b.GetCtime())
}

// persistPath is a persistence op's path: one of the paths changed since
// the root with probability changedBias when there is one, else any path.
func (g *MetisGenerator) persistPath(rng *rand.Rand) string {
	if len(g.changed) > 0 && rng.Float64() < changedBias {
		return pick(rng, g.changed)
	}
	p, _ := g.anyPath(rng)
	return p
}
