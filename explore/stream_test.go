package explore

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// streamEvent is one call of Config.Found or Config.Minimized.
type streamEvent struct {
	minimized bool // from Config.Minimized
	f         Finding
	applies   int // ops the System had applied when it came
}

func (e streamEvent) String() string {
	return fmt.Sprintf("min=%v id=%d dup=%d kind=%s trace=%v minimized=%v", e.minimized, e.f.ID, e.f.DuplicateOf, e.f.Kind, opKinds(e.f.Trace), e.f.Minimized)
}

// runStreamed runs a Checker over a toy System with a planted bug and
// records the findings as they are reported.
func runStreamed(t *testing.T, bug string, cfg Config) (*Result, []streamEvent, *toySystem) {
	t.Helper()
	sys := newToy("", bug)
	var events []streamEvent
	cfg.Found = func(f Finding) { events = append(events, streamEvent{false, f, sys.applies}) }
	cfg.Minimized = func(f Finding) { events = append(events, streamEvent{true, f, sys.applies}) }
	return mustCheck(t, sys, cfg), events, sys
}

// TestFindingsStreamed checks that a finding is reported the moment the
// search records it, with its trace as found, and once more with the same
// ID after the search when minimization is done with it.
func TestFindingsStreamed(t *testing.T) {
	t.Parallel()
	cfg := Config{Depth: 3, Branching: 20, Seed: 7, Ops: []string{OpMkdir, OpRmdir, OpCreateFile, OpTruncate},
		Pool: PathPool{Files: 1, Dirs: 1, Depth: 2}}
	res, events, _ := runStreamed(t, "rmdir-nonempty", cfg)
	if len(res.Findings) == 0 {
		t.Fatal("no findings")
	}
	found := map[int]Finding{}
	lastFound, firstMin := -1, len(events)
	for i, e := range events {
		t.Log(e)
		if !e.minimized {
			if e.f.ID != len(found)+1 {
				t.Errorf("found event %d: id %d, want %d (ids count from 1 in the order found)", i, e.f.ID, len(found)+1)
			}
			if e.f.Minimized || len(e.f.Trace) != e.f.OriginalLen || len(e.f.Trace) == 0 || len(e.f.Lanes) != 2 || e.f.Detail == "" {
				t.Errorf("found event %s: want the trace as found, not minimized, with both lanes' errnos", e)
			}
			if e.applies >= res.States {
				t.Errorf("found event %s after %d ops of %d: want it reported during the search", e, e.applies, res.States)
			}
			found[e.f.ID] = e.f
			lastFound = i
			continue
		}
		firstMin = min(firstMin, i)
		orig, ok := found[e.f.ID]
		switch {
		case !ok:
			t.Errorf("minimized event %s for an id never found", e)
		case !e.f.Minimized || len(e.f.Trace) > orig.OriginalLen || e.f.OriginalLen != orig.OriginalLen || e.f.Kind != orig.Kind:
			t.Errorf("minimized event %s: want minimized, no longer than %d ops as found, same kind as %s", e, orig.OriginalLen, orig.Kind)
		}
	}
	if firstMin < lastFound {
		t.Errorf("a minimized event (%d) before the last found one (%d): minimization runs after the search", firstMin, lastFound)
	}
	// Result.Findings are the minimized, non-duplicate ones.
	var want []int
	for _, e := range events {
		if e.minimized && e.f.DuplicateOf == 0 {
			want = append(want, e.f.ID)
		}
	}
	var got []int
	for _, f := range res.Findings {
		got = append(got, f.ID)
		if !f.Minimized {
			t.Errorf("result finding %d not minimized", f.ID)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("result finding ids %v, want the minimized non-duplicates %v", got, want)
	}

	// Streaming changes nothing in the search: same states, same events.
	res2, events2, _ := runStreamed(t, "rmdir-nonempty", cfg)
	if string(res.Digest) != string(res2.Digest) || res.States != res2.States || fmt.Sprint(events) != fmt.Sprint(events2) {
		t.Errorf("same seed, different runs:\n%v\n%v", events, events2)
	}
	plain, err := NewChecker(newToy("", "rmdir-nonempty"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res3, err := plain.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Digest) != string(res3.Digest) || res.Unique != res3.Unique {
		t.Errorf("callbacks changed the search: digest %x/%x", res.Digest, res3.Digest)
	}
}

// TestFindingsStreamedNoMinimize: without minimization a finding is
// reported once, as found.
func TestFindingsStreamedNoMinimize(t *testing.T) {
	t.Parallel()
	res, events, _ := runStreamed(t, "truncate-cap", Config{Depth: 2, Branching: 100, Seed: 7, NoMinimize: true,
		Ops: []string{OpCreateFile, OpTruncate, OpChmod}, Pool: PathPool{Files: 1, Depth: 1}})
	if len(events) == 0 || len(events) != len(res.Findings) {
		t.Fatalf("%d events, %d findings: want one event per finding", len(events), len(res.Findings))
	}
	for _, e := range events {
		if e.minimized || e.f.Minimized {
			t.Errorf("event %s with NoMinimize", e)
		}
	}
}

// TestFindingsDuplicateAfterMinimize: two findings that shrink to the same
// trace are both reported when found; the second's update names the first,
// and Result.Findings keeps only the first.
func TestFindingsDuplicateAfterMinimize(t *testing.T) {
	t.Parallel()
	sys := newToy("", "truncate-cap")
	var mins []Finding
	c, err := NewChecker(sys, Config{Minimized: func(f Finding) { mins = append(mins, f) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	root, _ := sys.Checkpoint(ctx)
	s := newSearch(c)
	w := &worker{s: s, sys: sys, root: root}
	a := []*agentv1.Request{create("f-00", 0o644), chmod("f-00", 0o600), truncate("f-00", 70000)}
	b := []*agentv1.Request{chmod("f-01", 0o600), create("f-00", 0o644), truncate("f-00", 70000)}
	for i, tr := range [][]*agentv1.Request{a, b} {
		s.order = append(s.order, &Finding{ID: i + 1, Kind: KindState, Trace: tr, OriginalLen: len(tr)})
	}
	if err := s.finish(ctx, []*worker{w}); err != nil {
		t.Fatal(err)
	}
	if len(mins) != 2 || mins[0].ID != 1 || mins[0].DuplicateOf != 0 || mins[1].ID != 2 || mins[1].DuplicateOf != 1 {
		t.Fatalf("minimized events %+v: want ids 1 and 2, the second a duplicate of 1", mins)
	}
	if !slices.Equal(opKinds(mins[1].Trace), []string{OpCreateFile, OpTruncate}) {
		t.Errorf("minimized trace %v", opKinds(mins[1].Trace))
	}
	if res := s.result(); len(res.Findings) != 1 || res.Findings[0].ID != 1 {
		t.Errorf("result findings %+v: want only id 1", res.Findings)
	}
}

// belowSystem adds a root from below that changes with every fingerprint.
type belowSystem struct {
	*toySystem
	n uint64
}

func (b *belowSystem) Fingerprint(ctx context.Context) ([]LaneState, error) {
	st, err := b.toySystem.Fingerprint(ctx)
	for i := range st {
		b.n++
		st[i].Below = binary.BigEndian.AppendUint64(nil, b.n)
	}
	return st, err
}

// TestBelowNotInKey: a lane's root from below is reported, not compared:
// the search visits the same states with or without it.
func TestBelowNotInKey(t *testing.T) {
	t.Parallel()
	cfg := Config{Depth: 2, Branching: 10, Seed: 3, Pool: PathPool{Files: 2, Dirs: 1, Depth: 2}}
	run := func(sys System) *Result { return mustCheck(t, sys, cfg) }
	plain := run(newToy("", ""))
	below := run(&belowSystem{toySystem: newToy("", "")})
	if plain.Unique != below.Unique || string(plain.Digest) != string(below.Digest) || len(below.Findings) != 0 {
		t.Errorf("with roots from below: %d unique, digest %x, findings %v; without: %d, %x", below.Unique, below.Digest, below.Findings, plain.Unique, plain.Digest)
	}
	if len(below.Root[0].Below) != 8 {
		t.Errorf("root state's Below %v, want it reported", below.Root[0].Below)
	}
}
