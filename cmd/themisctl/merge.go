package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
)

// maxShardJSON bounds one shard's --json file.
const maxShardJSON = 512 << 20

// newExploreMerge is `themisctl explore merge`.
func newExploreMerge(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "merge FILE...",
		Short: "Join the --json results of every shard of one search (themisctl --json explore --shard i/n) into the whole search's states, digest and findings",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var parts []*themisv1.ExploreResult
			for _, name := range args {
				p, err := readShard(name)
				if err != nil {
					return err
				}
				parts = append(parts, p)
			}
			m, err := mergeShards(args, parts)
			if err != nil {
				return err
			}
			if g.json {
				return writeProtoJSON(m)
			}
			return printMerged(m)
		},
	}
}

// readShard reads one shard's explore --json (an ExploreResult).
func readShard(name string) (*themisv1.ExploreResult, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxShardJSON+1))
	if err != nil {
		return nil, fmt.Errorf("merge: %s: %w", name, err)
	}
	if len(b) > maxShardJSON {
		return nil, fmt.Errorf("merge: %s: larger than %d MiB", name, maxShardJSON>>20)
	}
	var p themisv1.ExploreResult
	if err := jsonout.DecodeInto(b, &p); err != nil {
		return nil, fmt.Errorf("merge: %s: %w", name, err)
	}
	return &p, nil
}

// searchOf is the part of an explore request that makes its search: what
// every shard of one search shares (not its shard, workers or budgets).
func searchOf(req *themisv1.ExploreRequest) *themisv1.ExploreRequest {
	return &themisv1.ExploreRequest{Lanes: req.GetLanes(), Depth: req.GetDepth(), Branching: req.GetBranching(), Ops: req.GetOps(),
		Seed: req.GetSeed(), TimeMode: req.GetTimeMode(), Policy: req.GetPolicy()}
}

// checkShards checks that the parts are every shard of one search, once.
func checkShards(names []string, parts []*themisv1.ExploreResult) error {
	first := parts[0].GetSummary()
	search := searchOf(parts[0].GetRequest())
	seen := make(map[int32]string)
	for i, p := range parts {
		sum := p.GetSummary()
		switch {
		case p.GetRequest() == nil || sum.GetShardCount() < 1:
			return fmt.Errorf("merge: %s: not the --json of an explore --shard run (no request or shard)", names[i])
		case !proto.Equal(searchOf(p.GetRequest()), search):
			return fmt.Errorf("merge: %s is of another search than %s: %v, not %v", names[i], names[0], searchOf(p.GetRequest()), search)
		case sum.GetShardCount() != first.GetShardCount() || sum.GetShardDepth() != first.GetShardDepth():
			return fmt.Errorf("merge: %s is shard %d/%d at depth %d, %s of %d at depth %d", names[i], sum.GetShardIndex(), sum.GetShardCount(), sum.GetShardDepth(),
				names[0], first.GetShardCount(), first.GetShardDepth())
		case sum.GetStopped() != "":
			return fmt.Errorf("merge: %s stopped early (%s): its part is not complete", names[i], sum.GetStopped())
		case seen[sum.GetShardIndex()] != "":
			return fmt.Errorf("merge: %s and %s are both shard %d", seen[sum.GetShardIndex()], names[i], sum.GetShardIndex())
		}
		seen[sum.GetShardIndex()] = names[i]
	}
	for i := range first.GetShardCount() {
		if seen[i] == "" {
			return fmt.Errorf("merge: shard %d/%d is missing", i, first.GetShardCount())
		}
	}
	return nil
}

// mergeShards puts the parts together (explore.Merge).
func mergeShards(names []string, parts []*themisv1.ExploreResult) (*themisv1.MergeResult, error) {
	if err := checkShards(names, parts); err != nil {
		return nil, err
	}
	var eparts []explore.Part
	var found []*themisv1.Finding
	first := parts[0].GetSummary()
	m := &themisv1.MergeResult{Request: searchOf(parts[0].GetRequest()), Shards: first.GetShardCount(), ShardDepth: first.GetShardDepth()}
	for i, p := range parts {
		sum := p.GetSummary()
		ep := explore.Part{}
		for _, k := range sum.GetStateKeys() {
			ep.StateKeys = append(ep.StateKeys, string(k))
		}
		for _, d := range sum.GetStateDepths() {
			if d < 0 || d > explore.MaxDepth {
				return nil, fmt.Errorf("merge: %s: state_depths: %d is not a depth (0..%d)", names[i], d, explore.MaxDepth)
			}
			ep.StateDepths = append(ep.StateDepths, int(d))
		}
		for _, k := range sum.GetDeclaredStateKeys() {
			ep.DeclaredKeys = append(ep.DeclaredKeys, string(k))
		}
		for _, f := range p.GetFindingList() {
			pf, err := partFinding(f, len(found))
			if err != nil {
				return nil, fmt.Errorf("merge: %s: finding %s: %w", names[i], f.GetId(), err)
			}
			found = append(found, f)
			ep.Findings = append(ep.Findings, pf)
		}
		m.States += sum.GetStates()
		m.DeclaredOps += sum.GetDeclaredOps()
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

// partFinding is a finding as explore.Merge takes it; its ID indexes the
// findings of all the parts.
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

func printMerged(m *themisv1.MergeResult) error {
	w := newTable()
	fmt.Fprintf(w, "shards\t%d (at depth %d)\nunique states\t%d\nfindings\t%d\nstates (all shards)\t%d\ndigest\t%s\n",
		m.GetShards(), m.GetShardDepth(), m.GetUniqueStates(), m.GetFindings(), m.GetStates(), m.GetDigest())
	fmt.Fprintf(w, "judged by a declared difference\t%d ops (all shards), %d unique states\n", m.GetDeclaredOps(), m.GetDeclaredStates())
	for _, f := range m.GetFindingList() {
		fmt.Fprintf(w, "finding\t%s [%s]: %s\n", f.GetKind(), strings.Join(f.GetTrace(), "; "), f.GetDetail())
	}
	return w.Flush()
}
