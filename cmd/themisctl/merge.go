package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/spf13/cobra"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
)

// maxShardJSON bounds one shard's --json file.
const maxShardJSON = 512 << 20

// mergedJSON is explore merge's --json output: what the whole search run
// at once reports of its states and findings.
type mergedJSON struct {
	Search       *searchJSON `json:"search"`
	Shards       int32       `json:"shards"`
	ShardDepth   int32       `json:"shard_depth"`
	UniqueStates int         `json:"unique_states"`
	// UniqueByDepth is absent when a shard did not report its depths.
	UniqueByDepth []int  `json:"unique_by_depth,omitempty"`
	Digest        string `json:"digest"`
	Findings      int    `json:"findings"`
	States        int64  `json:"states"` // ops applied by all the shards together
	// DeclaredStates counts the unique states judged by a declared
	// difference; DeclaredOps the ops whose errno was, applied by all the
	// shards together (as States).
	DeclaredStates int                `json:"declared_states"`
	DeclaredOps    int64              `json:"declared_ops"`
	FindingList    []*findingJSONView `json:"finding_list"`
}

// newExploreMerge is `themisctl explore merge`.
func newExploreMerge(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "merge FILE...",
		Short: "Join the --json results of every shard of one search (themisctl --json explore --shard i/n) into the whole search's states, digest and findings",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var parts []exploreJSON
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
				return writeJSON(os.Stdout, m)
			}
			return printMerged(m)
		},
	}
}

// readShard reads one shard's explore --json.
func readShard(name string) (exploreJSON, error) {
	var p exploreJSON
	f, err := os.Open(name)
	if err != nil {
		return p, fmt.Errorf("merge: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxShardJSON+1))
	if err != nil {
		return p, fmt.Errorf("merge: %s: %w", name, err)
	}
	if len(b) > maxShardJSON {
		return p, fmt.Errorf("merge: %s: larger than %d MiB", name, maxShardJSON>>20)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("merge: %s: %w", name, err)
	}
	return p, nil
}

// checkShards checks that the parts are every shard of one search, once.
func checkShards(names []string, parts []exploreJSON) error {
	first := parts[0]
	if first.Search == nil || first.Shard == nil {
		return fmt.Errorf("merge: %s: not the --json of an explore --shard run (no search or shard)", names[0])
	}
	seen := make(map[int32]string)
	for i, p := range parts {
		switch {
		case p.Search == nil || p.Shard == nil:
			return fmt.Errorf("merge: %s: not the --json of an explore --shard run (no search or shard)", names[i])
		case !reflect.DeepEqual(p.Search, first.Search):
			return fmt.Errorf("merge: %s is of another search than %s: %+v, not %+v", names[i], names[0], *p.Search, *first.Search)
		case p.Shard.Count != first.Shard.Count || p.Shard.Depth != first.Shard.Depth:
			return fmt.Errorf("merge: %s is shard %d/%d at depth %d, %s of %d at depth %d", names[i], p.Shard.Index, p.Shard.Count, p.Shard.Depth, names[0], first.Shard.Count, first.Shard.Depth)
		case p.Stopped != "":
			return fmt.Errorf("merge: %s stopped early (%s): its part is not complete", names[i], p.Stopped)
		case seen[p.Shard.Index] != "":
			return fmt.Errorf("merge: %s and %s are both shard %d", seen[p.Shard.Index], names[i], p.Shard.Index)
		}
		seen[p.Shard.Index] = names[i]
	}
	for i := range first.Shard.Count {
		if seen[i] == "" {
			return fmt.Errorf("merge: shard %d/%d is missing", i, first.Shard.Count)
		}
	}
	return nil
}

// mergeShards puts the parts together (explore.Merge).
func mergeShards(names []string, parts []exploreJSON) (*mergedJSON, error) {
	if err := checkShards(names, parts); err != nil {
		return nil, err
	}
	var eparts []explore.Part
	var views []*findingJSONView
	m := &mergedJSON{Search: parts[0].Search, Shards: parts[0].Shard.Count, ShardDepth: parts[0].Shard.Depth, FindingList: []*findingJSONView{}}
	for i, p := range parts {
		ep := explore.Part{}
		var err error
		if ep.StateKeys, err = hexKeys(p.StateKeys); err != nil {
			return nil, fmt.Errorf("merge: %s: state key %w", names[i], err)
		}
		for _, d := range p.StateDepths {
			if d < 0 || d > explore.MaxDepth {
				return nil, fmt.Errorf("merge: %s: state_depths: %d is not a depth (0..%d)", names[i], d, explore.MaxDepth)
			}
			ep.StateDepths = append(ep.StateDepths, int(d))
		}
		if ep.DeclaredKeys, err = hexKeys(p.DeclaredKeys); err != nil {
			return nil, fmt.Errorf("merge: %s: declared state key %w", names[i], err)
		}
		for _, f := range p.FindingList {
			pf, err := partFinding(f, len(views))
			if err != nil {
				return nil, fmt.Errorf("merge: %s: finding %s: %w", names[i], f.ID, err)
			}
			views = append(views, f)
			ep.Findings = append(ep.Findings, pf)
		}
		m.States += p.States
		m.DeclaredOps += p.DeclaredOps
		eparts = append(eparts, ep)
	}
	merged := explore.Merge(eparts)
	m.UniqueStates, m.Digest, m.DeclaredStates = merged.Unique, hex.EncodeToString(merged.Digest), merged.DeclaredStates
	m.UniqueByDepth = merged.UniqueByDepth
	for _, f := range merged.Findings {
		v := *views[f.Finding.ID]
		v.DuplicateOf = ""
		m.FindingList = append(m.FindingList, &v)
	}
	m.Findings = len(m.FindingList)
	return m, nil
}

// hexKeys decodes hex state keys.
func hexKeys(keys []string) ([]string, error) {
	var out []string
	for _, k := range keys {
		b, err := hex.DecodeString(k)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		out = append(out, string(b))
	}
	return out, nil
}

// partFinding is a finding view as explore.Merge takes it; its ID indexes
// the views.
func partFinding(f *findingJSONView, id int) (explore.PartFinding, error) {
	if f.Signature == "" {
		return explore.PartFinding{}, errors.New("no signature (a daemon older than explore merge)")
	}
	trace, err := opspec.ParseTrace(f.Trace)
	if err != nil {
		return explore.PartFinding{}, fmt.Errorf("trace: %w", err)
	}
	found, err := opspec.ParseTrace(f.FoundTrace)
	if err != nil {
		return explore.PartFinding{}, fmt.Errorf("found trace: %w", err)
	}
	return explore.PartFinding{Signature: f.Signature, Finding: explore.Finding{ID: id, Kind: f.Kind, Trace: trace, Found: found}}, nil
}

func printMerged(m *mergedJSON) error {
	w := newTable()
	fmt.Fprintf(w, "shards\t%d (at depth %d)\nunique states\t%d\nfindings\t%d\nstates (all shards)\t%d\ndigest\t%s\n",
		m.Shards, m.ShardDepth, m.UniqueStates, m.Findings, m.States, m.Digest)
	fmt.Fprintf(w, "judged by a declared difference\t%d ops (all shards), %d unique states\n", m.DeclaredOps, m.DeclaredStates)
	for _, f := range m.FindingList {
		fmt.Fprintf(w, "finding\t%s [%s]: %s\n", f.Kind, strings.Join(f.Trace, "; "), f.Detail)
	}
	return w.Flush()
}
