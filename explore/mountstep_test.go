package explore

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestMountSteps: a lane that gets a chmod wrong only after two ops in
// one mount ("mount-chain") is found by walks with mount steps and missed
// by the same walks without them, where every step starts from a fresh
// mount; the finding's trace carries its keep_mount marks, and replayed
// as it is it diverges again, with the marks taken off it does not. The
// same seed walks the same walks.
func TestMountSteps(t *testing.T) {
	t.Parallel()
	cfg := Config{Depth: 8, Seed: 3, Walks: 20, Ops: []string{OpCreateFile, OpWriteFile, OpChmod}}
	without := mustCheck(t, newToy("", "mount-chain"), cfg)
	if len(without.Findings) != 0 {
		t.Fatalf("walks without mount steps: %d findings, want 0 (every step on a fresh mount)", len(without.Findings))
	}
	cfg.MountSteps = true
	with, again := mustCheck(t, newToy("", "mount-chain"), cfg), mustCheck(t, newToy("", "mount-chain"), cfg)
	if !bytes.Equal(with.Digest, again.Digest) || with.States != again.States {
		t.Error("the same seed walked other walks")
	}
	i := slices.IndexFunc(with.Findings, func(f Finding) bool { return f.Kind == KindState && f.Field == "mode" })
	if i < 0 {
		t.Fatalf("walks with mount steps: no mode divergence in %d findings", len(with.Findings))
	}
	f := with.Findings[i]
	if !slices.ContainsFunc(f.Trace, SharesMount) || OpKind(f.Trace[len(f.Trace)-1]) != OpChmod {
		t.Fatalf("finding trace %v: want ops in one mount, ending in the chmod", f.Trace)
	}
	replay := func(trace []*agentv1.Request) bool {
		sys := newToy("", "mount-chain")
		root, err := sys.Checkpoint(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out, err := Replay(context.Background(), sys, root, trace)
		if err != nil {
			t.Fatal(err)
		}
		return divergent(out.States)
	}
	if !replay(f.Trace) {
		t.Errorf("the finding's trace %v did not diverge when replayed", f.Trace)
	}
	unmarked := make([]*agentv1.Request, len(f.Trace))
	for i, op := range f.Trace {
		unmarked[i] = proto.Clone(op).(*agentv1.Request)
		unmarked[i].KeepMount = false
	}
	if replay(unmarked) {
		t.Errorf("the trace %v diverged with every op on a fresh mount", unmarked)
	}
}

// TestKeepMount: a marked copy, the op itself untouched; a burst marks its
// first op only.
func TestKeepMount(t *testing.T) {
	t.Parallel()
	op := create("f-00", 0o644)
	if k := KeepMount(op); !k.GetKeepMount() || op.GetKeepMount() || !SharesMount(k) {
		t.Errorf("KeepMount(%v) = %v", op, k)
	}
	burst := buildCollide("", OpCreateFile, "", 0o644)
	k := Steps(KeepMount(burst))
	if !k[0].GetKeepMount() || k[1].GetKeepMount() || Steps(burst)[0].GetKeepMount() {
		t.Errorf("KeepMount of a burst: first op %v, second %v", k[0], k[1])
	}
}
