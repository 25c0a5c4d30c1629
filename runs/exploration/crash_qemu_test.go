package exploration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestExploreCrashRealGuest is explore --crash on the ext2 control. By
// default the dirty crash states of ext2 (no journal: fsck repairs them)
// are counted as expected, not found. Strict, the search checks the crash
// states of its persistence ops (counted), finds crash findings, stores
// them with the search's path as their setup, and a finding's crash state,
// checked again in a fresh session by crashcheck (setup unsynced, the one
// state), is bad the same way.
func TestExploreCrashRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	lenient, err := Run(ctx, m, Options{Lanes: []string{"ext2"}, Depth: 2, Branching: 2, Ops: []string{"mkdir", "sync"},
		Workers: 1, Crash: &CrashOptions{Crash: crash.Options{MaxSubset: 1, MaxStates: 16}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// How many of its states are not clean depends on what the guest wrote
	// back before each checkpoint; every one is counted as repaired (no
	// fsync here: nothing to lose).
	if c := lenient.Crash; c == nil || c.Points == 0 || c.Findings != 0 || c.Repaired != c.NotClean {
		t.Errorf("ext2 without --crash-strict: crash counts %+v, want every not-clean state counted as repaired and no finding", c)
	}
	// What the guest had written back before each persistence op's log
	// started decides how many crash states are not clean: a run where
	// every state came out clean (measured once in CI: 5 states, none
	// dirty) has nothing to find and is run once more.
	var sum *Summary
	var found []session.Finding
	for try := 1; ; try++ {
		sum, found = strictCrashRun(ctx, t, m)
		if c := sum.Crash; c.NotClean > 0 || try == 2 {
			break
		}
		t.Logf("try %d: every crash state clean (%+v); again", try, *sum.Crash)
	}
	c := sum.Crash
	t.Logf("ext2, depth 2: %d states, crash counts %+v", sum.States, *c)
	if c.Points == 0 || c.States == 0 || c.Findings == 0 || len(found) != c.Findings || sum.Findings < c.Findings {
		t.Fatalf("crash counts %+v, %d findings streamed, summary findings %d: want persistence ops checked and the ext2 control's findings", c, len(found), sum.Findings)
	}
	for _, f := range found[:1] {
		replayCrash(ctx, t, m, f)
	}
}

// strictCrashRun is explore --crash --crash-strict on the ext2 control at
// depth 2: its summary (with crash counts) and the findings it streamed.
func strictCrashRun(ctx context.Context, t *testing.T, m *session.Manager) (*Summary, []session.Finding) {
	t.Helper()
	var mu sync.Mutex
	var found []session.Finding
	sum, err := Run(ctx, m, Options{Lanes: []string{"ext2"}, Depth: 2, Branching: 4, Ops: []string{"mkdir", "create_file", "fsync", "sync"},
		Workers: 1, Crash: &CrashOptions{Crash: crash.Options{MaxSubset: 1, MaxStates: 16}, Strict: true}}, nil, func(f session.Finding) {
		mu.Lock()
		defer mu.Unlock()
		found = append(found, f)
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Crash == nil {
		t.Fatal("no crash counts in the summary")
	}
	return sum, found
}

// replayCrash checks finding f's crash state again in a fresh session
// (crashcheck: the setup unsynced, the one state): it must be stored, and
// bad the same way.
func replayCrash(ctx context.Context, t *testing.T, m *session.Manager, f session.Finding) {
	t.Helper()
	stored, err := m.Finding(ctx, f.ID)
	if err != nil || stored.Crash == nil || stored.Kind != session.KindCrash {
		t.Fatalf("finding %s in the ledger: %+v, %v", f.ID, stored, err)
	}
	want := crashcheck.Class(crashcheck.Result{Verdict: f.Crash.Verdict, Durability: f.Crash.Durability})
	// The setup runs unsynced, so what the guest wrote back of it before
	// the log started can differ from the search's (writeback timing): a
	// replay whose log lacks the state is tried again, three times in all.
	var got []crashcheck.Result
	for range 3 {
		got = nil
		_, err = crashcheck.Run(ctx, m, crashcheck.Options{Lanes: f.LaneSpecs, Setup: f.Crash.Setup, NoSetupSync: true, Trace: f.Trace, Only: f.Crash.Keep},
			crashcheck.Sinks{Result: func(r crashcheck.Result) { got = append(got, r) }})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Verdict != crashcheck.NoState {
			break
		}
		t.Logf("replay of %s: %s; again", f.ID, got[0].Output)
	}
	if len(got) != 1 || crashcheck.Class(got[0]) != want {
		t.Errorf("finding %s (setup %q, trace %q, keep %v: %s) replayed: %+v, want one state of class %q", f.ID, f.Crash.Setup, f.Trace, f.Crash.Keep, f.Detail, got, want)
	}
}
