package explore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/internal/kreport"
)

// otherReport is a second toy fault: another function, so another
// signature than crashReport's.
var otherReport = kreport.Report{Kind: kreport.Bug, Title: "kernel BUG at fs/toy/dir.c:40!", RIP: "toy_rmdir+0x10/0x50 [toy]", Panic: "Fatal exception"}

// latentToy is a toy kernel with state a lane restore does not put back:
// "create f-00" leaves a mark in the kernel, and a mkdir of d-00 in a
// kernel so marked crashes with crashReport; without the mark, a mkdir
// of d-00 where f-01 exists crashes with otherReport. With reset, Restore
// clears the mark too (a machine revert); without it only a fresh System
// is unmarked (the remount revert). tries counts the replays from the
// root it ran (a Restore of its first checkpoint).
type latentToy struct {
	*toySystem
	reset, marked, dead bool
	root                CheckpointID
	tries               int
}

func (k *latentToy) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	if k.dead {
		return nil, fmt.Errorf("toy: %w", ErrGuestDied)
	}
	switch {
	case op.GetCreate().GetPath() == "f-00":
		k.marked = true
	case op.GetMkdir().GetPath() == "d-00" && k.marked:
		return nil, k.die(crashReport)
	case op.GetMkdir().GetPath() == "d-00" && k.exists("f-01"):
		return nil, k.die(otherReport)
	}
	return k.toySystem.Apply(ctx, op)
}

func (k *latentToy) die(r kreport.Report) error {
	k.dead = true
	return &KernelCrash{Report: r, Err: fmt.Errorf("toy: the guest reset: %w", ErrGuestDied)}
}

func (k *latentToy) exists(p string) bool {
	_, ok := k.lanes[0].names[p]
	return ok
}

func (k *latentToy) Checkpoint(ctx context.Context) (CheckpointID, error) {
	if k.dead {
		return "", fmt.Errorf("toy: %w", ErrGuestDied)
	}
	id, err := k.toySystem.Checkpoint(ctx)
	if k.root == "" {
		k.root = id
	}
	return id, err
}

func (k *latentToy) Restore(ctx context.Context, id CheckpointID) error {
	if k.dead {
		return fmt.Errorf("toy: %w", ErrGuestDied)
	}
	if id == k.root {
		k.tries++
	}
	if k.reset {
		k.marked = false
	}
	return k.toySystem.Restore(ctx, id)
}

func createOp(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Path: p, Flags: oCreat | oWronly, Mode: 0o644}}}
}

func mkdirOp(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: p, Mode: 0o755}}}
}

// TestMinimizeKernel: a kernel finding whose trace as found is "create
// f-00, create f-01, mkdir d-00" shrinks to "create f-00, mkdir d-00",
// every try in a fresh System: on the remount-like toy, whose restore
// keeps the kernel's mark, with Workers.Fresh (without it, the mark a
// try left makes "create f-01, mkdir d-00" crash the next: the wrong
// trace); on the machine-like toy, whose restore resets it, without. A
// try that crashes with another report ("create f-01, mkdir d-00" in a
// fresh kernel: otherReport) does not reproduce, and a System a try
// killed is replaced before the next. The minimized finding carries the
// report of its last try and ends at the crashing op; a trace whose op
// no longer crashes is kept as found, not minimized.
func TestMinimizeKernel(t *testing.T) {
	t.Parallel()
	found := []*agentv1.Request{createOp("f-00"), createOp("f-01"), mkdirOp("d-00")}
	tests := []struct {
		name         string
		reset, fresh bool
		trace        []*agentv1.Request
		want         []*agentv1.Request // nil: not minimized
	}{
		{"lanes-only restore, fresh systems", false, true, found, []*agentv1.Request{createOp("f-00"), mkdirOp("d-00")}},
		{"machine restore", true, false, found, []*agentv1.Request{createOp("f-00"), mkdirOp("d-00")}},
		{"a crash before the last op", false, true, []*agentv1.Request{createOp("f-00"), mkdirOp("d-00"), mkdirOp("d-01")}, []*agentv1.Request{createOp("f-00"), mkdirOp("d-00")}},
		{"does not reproduce", false, true, []*agentv1.Request{createOp("f-01"), mkdirOp("d-01")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var made []*latentToy
			mk := func() System {
				k := &latentToy{toySystem: newToy(""), reset: tt.reset}
				made = append(made, k)
				return k
			}
			w := Workers{Systems: []System{mk()}, Replace: func(context.Context, int, System) (System, error) { return mk(), nil }}
			if tt.fresh {
				w.Fresh = func(_ context.Context, _ int, live System) (System, error) {
					if live.(*latentToy).dead {
						t.Error("Fresh called with a dead System")
					}
					return mk(), nil
				}
			}
			f := minimizeOne(t, w, Finding{Kind: KindKernel, Trace: tt.trace, Kernel: &crashReport, Detail: "as found"})
			if tt.want == nil {
				if f.Minimized || len(f.Trace) != len(tt.trace) {
					t.Errorf("minimized %v to %v: want it kept as found", f.Minimized, opKinds(f.Trace))
				}
				return
			}
			if !f.Minimized || !slices.EqualFunc(f.Trace, tt.want, func(a, b *agentv1.Request) bool { return opKey(a) == opKey(b) }) {
				t.Errorf("minimized %v: %v, want %v", f.Minimized, describe(f.Trace), describe(tt.want))
			}
			if f.Kernel == nil || f.Kernel.Signature() != crashReport.Signature() || f.Detail != kernelDetail(&crashReport, tt.want) {
				t.Errorf("report %+v, detail %q", f.Kernel, f.Detail)
			}
			for i, k := range made {
				if tt.fresh && k.tries > 1 {
					t.Errorf("System %d ran %d tries: want each in a fresh one", i, k.tries)
				}
			}
			t.Logf("%d Systems for %d ops as found: %v", len(made), len(tt.trace), describe(f.Trace))
		})
	}
}

// minimizeOne minimizes f on worker 0 of a search over w, as finish does
// after a search.
func minimizeOne(t *testing.T, w Workers, f Finding) Finding {
	t.Helper()
	c, err := NewParallelChecker(w, Config{Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := newSearch(c)
	s.replace, s.fresh = w.Replace, w.Fresh
	wk := &worker{s: s, sys: w.Systems[0]}
	ctx := context.Background()
	st, err := wk.sys.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.rootKey = stateKey(st)
	if err := wk.init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.minimize(ctx, wk, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func describe(trace []*agentv1.Request) []string {
	out := make([]string, len(trace))
	for i, op := range trace {
		out[i] = op.String()
	}
	return out
}
