package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/shards"
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
			m, err := shards.Explore(args, parts)
			if err != nil {
				return fmt.Errorf("merge: %w", err)
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

func printMerged(m *themisv1.MergeExploreResponse) error {
	w := newTable()
	fmt.Fprintf(w, "shards\t%d (at depth %d)\nunique states\t%d\nfindings\t%d\nstates (all shards)\t%d\ndigest\t%s\n",
		m.GetShards(), m.GetShardDepth(), m.GetUniqueStates(), m.GetFindings(), m.GetStates(), m.GetDigest())
	fmt.Fprintf(w, "judged by a declared difference\t%d ops (all shards), %d unique states\n", m.GetDeclaredOps(), m.GetDeclaredStates())
	for _, f := range m.GetFindingList() {
		fmt.Fprintf(w, "finding\t%s [%s]: %s\n", f.GetKind(), strings.Join(f.GetTrace(), "; "), f.GetDetail())
	}
	return w.Flush()
}
