package shards

import (
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
)

// MaxShards bounds the shards one merge takes.
const MaxShards = 4096

// Explore joins parts, every shard of one search; names[i] names part i
// in errors (a file, or "shards[i]"). An error is errkind.ErrInvalid.
func Explore(names []string, parts []*themisv1.ExploreResult) (*themisv1.MergeExploreResponse, error) {
	if err := check(names, parts); err != nil {
		return nil, err
	}
	var eparts []explore.Part
	var found []*themisv1.Finding
	first := parts[0].GetSummary()
	m := &themisv1.MergeExploreResponse{Request: searchOf(parts[0].GetRequest()), Shards: first.GetShardCount(), ShardDepth: first.GetShardDepth()}
	for i, p := range parts {
		ep, err := part(p, &found)
		if err != nil {
			return nil, errkind.Invalid(names[i], "%v", err)
		}
		m.States += p.GetSummary().GetStates()
		m.DeclaredOps += p.GetSummary().GetDeclaredOps()
		eparts = append(eparts, ep)
	}
	merged := explore.Merge(eparts)
	m.UniqueStates, m.Digest, m.DeclaredStates = int64(merged.Unique), hex.EncodeToString(merged.Digest), int64(merged.DeclaredStates)
	for _, n := range merged.UniqueByDepth {
		m.UniqueByDepth = append(m.UniqueByDepth, int64(n))
	}
	for _, f := range merged.Findings {
		v := proto.CloneOf(found[f.Finding.ID])
		v.DuplicateOf = ""
		m.FindingList = append(m.FindingList, v)
	}
	m.Findings = int64(len(m.FindingList))
	return m, nil
}

// part is one shard's result as explore.Merge takes it; its findings are
// appended to found, whose indices are their IDs.
func part(p *themisv1.ExploreResult, found *[]*themisv1.Finding) (explore.Part, error) {
	sum := p.GetSummary()
	ep := explore.Part{}
	for _, k := range sum.GetStateKeys() {
		ep.StateKeys = append(ep.StateKeys, string(k))
	}
	for _, d := range sum.GetStateDepths() {
		if d < 0 || d > explore.MaxDepth {
			return ep, fmt.Errorf("state_depths: %d is not a depth (0..%d)", d, explore.MaxDepth)
		}
		ep.StateDepths = append(ep.StateDepths, int(d))
	}
	for _, k := range sum.GetDeclaredStateKeys() {
		ep.DeclaredKeys = append(ep.DeclaredKeys, string(k))
	}
	for _, f := range p.GetFindingList() {
		pf, err := partFinding(f, len(*found))
		if err != nil {
			return ep, fmt.Errorf("finding %s: %w", f.GetId(), err)
		}
		*found = append(*found, f)
		ep.Findings = append(ep.Findings, pf)
	}
	return ep, nil
}

// searchOf is the part of an explore request that makes its search: what
// every shard of one search shares (not its shard, workers or budgets).
func searchOf(req *themisv1.ExploreRequest) *themisv1.ExploreRequest {
	return &themisv1.ExploreRequest{Lanes: req.GetLanes(), Depth: req.GetDepth(), Branching: req.GetBranching(), Ops: req.GetOps(),
		Seed: req.GetSeed(), TimeMode: req.GetTimeMode(), Policy: req.GetPolicy()}
}

// check checks that the parts are every shard of one search, once.
func check(names []string, parts []*themisv1.ExploreResult) error {
	switch {
	case len(parts) == 0:
		return errkind.Invalid("shards", "none given")
	case len(parts) > MaxShards:
		return errkind.Invalid("shards", "%d given, at most %d", len(parts), MaxShards)
	case len(names) != len(parts):
		return fmt.Errorf("merge: %d names for %d shards", len(names), len(parts))
	}
	first := parts[0].GetSummary()
	search := searchOf(parts[0].GetRequest())
	seen := make(map[int32]string)
	for i, p := range parts {
		sum := p.GetSummary()
		switch {
		case p.GetRequest() == nil || sum.GetShardCount() < 1:
			return errkind.Invalid(names[i], "not the result of an explore --shard run (no request or shard)")
		case sum.GetShardCount() > MaxShards || sum.GetShardIndex() < 0 || sum.GetShardIndex() >= sum.GetShardCount():
			return errkind.Invalid(names[i], "shard %d/%d: want an index below a count of at most %d", sum.GetShardIndex(), sum.GetShardCount(), MaxShards)
		case !proto.Equal(searchOf(p.GetRequest()), search):
			return errkind.Invalid(names[i], "of another search than %s: %v, not %v", names[0], searchOf(p.GetRequest()), search)
		case sum.GetShardCount() != first.GetShardCount() || sum.GetShardDepth() != first.GetShardDepth():
			return errkind.Invalid(names[i], "shard %d/%d at depth %d, %s of %d at depth %d", sum.GetShardIndex(), sum.GetShardCount(), sum.GetShardDepth(),
				names[0], first.GetShardCount(), first.GetShardDepth())
		case sum.GetStopped() != "":
			return errkind.Invalid(names[i], "stopped early (%s): its part is not complete", sum.GetStopped())
		case seen[sum.GetShardIndex()] != "":
			return errkind.Invalid(names[i], "%s and %s are both shard %d", seen[sum.GetShardIndex()], names[i], sum.GetShardIndex())
		}
		seen[sum.GetShardIndex()] = names[i]
	}
	for i := range first.GetShardCount() {
		if seen[i] == "" {
			return errkind.Invalid("shards", "shard %d/%d is missing", i, first.GetShardCount())
		}
	}
	return nil
}

// partFinding is a finding as explore.Merge takes it, with id.
func partFinding(f *themisv1.Finding, id int) (explore.PartFinding, error) {
	if f.GetSignature() == "" {
		return explore.PartFinding{}, errors.New("no signature (a daemon older than explore merge)")
	}
	trace, err := opspec.ParseTrace(f.GetTrace())
	if err != nil {
		return explore.PartFinding{}, fmt.Errorf("trace: %w", err)
	}
	asFound := f.GetFoundTrace()
	if asFound == nil {
		asFound = f.GetTrace()
	}
	found, err := opspec.ParseTrace(asFound)
	if err != nil {
		return explore.PartFinding{}, fmt.Errorf("found trace: %w", err)
	}
	return explore.PartFinding{Signature: f.GetSignature(), Finding: explore.Finding{ID: id, Kind: f.GetKind(), Trace: trace, Found: found}}, nil
}
