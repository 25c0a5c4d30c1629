package exploration

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestExploreRealGuest runs Explore on the real guest (QEMU): a
// deterministic ext2 run, a single-lane run with its self-references, a
// differential ext2/vfat run with findings streamed as found and then
// minimized, and a run cancelled at its first finding.
func TestExploreRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	report := func(t *testing.T, s *Summary) {
		t.Helper()
		per := func(d time.Duration) time.Duration {
			if s.States == 0 {
				return 0
			}
			return (d / time.Duration(s.States)).Round(10 * time.Microsecond)
		}
		t.Logf("%d states, %d unique, %d findings, depth %d, stopped %q: %.1f states/s in %s (boot %s); per state: op %s, fingerprint %s, restore %s, checkpoint+drop %s, checks %s",
			s.States, s.Unique, s.Findings, s.MaxDepth, s.Stopped, s.StatesPerSec, s.Elapsed.Round(time.Millisecond), s.Boot.Round(time.Millisecond),
			per(s.OpTime), per(s.FingerprintTime), per(s.RestoreTime), per(s.CheckpointTime), per(s.CheckTime))
	}

	t.Run("Ext2Deterministic", func(t *testing.T) {
		// The same seed with each revert: the same states in the same
		// order (a correct ext2 keeps a state across umount+mount).
		var sums []*Summary
		for _, revert := range []string{RevertRemount, RevertMachine} {
			o := Options{Workers: 1, Lanes: []string{"ext2"}, Depth: 2, Branching: 10, MaxStates: 40, Seed: 7, Revert: revert}
			progressed := 0
			s, err := Run(ctx, m, o, func(Progress) { progressed++ }, nil)
			if err != nil {
				t.Fatal(err)
			}
			report(t, s)
			if s.States == 0 || s.Unique < 2 || s.MaxDepth != 2 || progressed == 0 {
				t.Errorf("summary %+v (%d progress calls): want states, unique states, depth 2 and progress", s, progressed)
			}
			if s.Findings != 0 {
				fs, _ := m.Findings(ctx, s.Session)
				t.Errorf("single ext2 lane without self-references: findings %+v", fs)
			}
			in, err := m.Get(ctx, s.Session)
			// 40 states cut the depth-2 space (every op kind at every state).
			if err != nil || in.State != session.StateEnded || in.Reason != "explore finished (stopped: budget)" || s.Stopped != "budget" {
				t.Errorf("session after the run: %+v, %v; summary stopped %q: want ended by the state budget", in, err, s.Stopped)
			}
			sums = append(sums, s)
		}
		for _, b := range sums[1:] {
			a := sums[0]
			if a.Unique != b.Unique || a.States != b.States || a.Digest != b.Digest || !reflect.DeepEqual(a.Roots, b.Roots) {
				t.Errorf("same seed, revert %s against %s: %d/%d unique, %d/%d states, digest %s/%s",
					a.Revert, b.Revert, a.Unique, b.Unique, a.States, b.States, a.Digest, b.Digest)
			}
		}
	})

	// The self-references on a healthy filesystem find nothing: ext2 with
	// e2fsck -fn, btrfs with btrfs check --readonly --check-data-csum.
	// xfs with xfs_repair -n (the image quiesced by umount+mount), exfat
	// with fsck.exfat -n; f2fs (fsck.f2fs --dry-run) and minix (fsck.minix
	// -f) on the generic kernel flavour.
	for _, c := range []struct{ lane, name string }{{"ext2", "Ext2SelfReferences"}, {"btrfs", "BtrfsSelfReferences"},
		{"xfs", "XfsSelfReferences"}, {"exfat", "ExfatSelfReferences"}, {"f2fs", "F2fsSelfReferences"}, {"minix", "MinixSelfReferences"}} {
		lane := c.lane
		t.Run(c.name, func(t *testing.T) {
			s, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{lane}, Depth: 1, Branching: 10, Seed: 7, Remount: true, Fsck: true}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			report(t, s)
			fs, err := m.Findings(ctx, s.Session)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fs {
				t.Errorf("finding on a healthy %s: %s %v: %s", lane, f.Kind, f.Trace, f.Detail)
			}
			if s.CheckTime <= 0 {
				t.Errorf("check time %s: the self-references did not run", s.CheckTime)
			}
		})
	}

	// Each finding is streamed (and stored) as found, during the search,
	// then once more, same id, with its minimized trace.
	t.Run("Ext2VfatDifferential", func(t *testing.T) {
		var msgs []session.Finding
		states := 0 // progress so far, when a finding comes
		var statesAt []int
		// metis: vfat's declared modes and owners
		// are findings again (its op rules still apply).
		s, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2", "vfat"}, Depth: 1, Branching: 10, Seed: 7, Policy: "metis"},
			func(p Progress) { states = p.States },
			func(f session.Finding) { msgs = append(msgs, f); statesAt = append(statesAt, states) })
		if err != nil {
			t.Fatal(err)
		}
		report(t, s)
		latest := map[string]session.Finding{}
		var ids []string
		dups := 0
		for i, f := range msgs {
			t.Logf("%s %s minimized=%v dup=%q: %v as found %v (%s %q): %s", f.ID, f.Kind, f.Minimized, f.DuplicateOf, f.Trace, f.FoundTrace, f.Field, f.Path, f.Detail)
			for _, op := range f.Trace {
				if _, err := opspec.Parse(op); err != nil {
					t.Errorf("finding %s: trace op %q does not parse: %v", f.ID, op, err)
				}
			}
			prev, seen := latest[f.ID]
			switch {
			case !seen && (f.Minimized || !reflect.DeepEqual(f.Trace, f.FoundTrace) || len(f.Trace) == 0):
				t.Errorf("first message of %s: want the trace as found, not minimized", f.ID)
			case !seen && statesAt[i] >= s.States:
				t.Errorf("finding %s sent after %d of %d states: want it during the search", f.ID, statesAt[i], s.States)
			case seen && (prev.Minimized || !reflect.DeepEqual(f.FoundTrace, prev.FoundTrace) || len(f.Trace) > len(prev.Trace)):
				t.Errorf("update of %s: %+v after %+v", f.ID, f, prev)
			}
			if !seen {
				ids = append(ids, f.ID)
			}
			latest[f.ID] = f
		}
		for _, id := range ids {
			if latest[id].DuplicateOf != "" {
				dups++
			}
		}
		if len(ids) == 0 || s.Findings != len(ids)-dups {
			t.Fatalf("ext2 against vfat: %d findings in the summary, %d streamed (%d duplicates), want some", s.Findings, len(ids), dups)
		}
		stored, err := m.Findings(ctx, s.Session)
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) != len(ids) {
			t.Errorf("%d findings stored, %d streamed", len(stored), len(ids))
		}
		ok := false
		for _, id := range ids {
			f := latest[id]
			if len(f.Trace) > 0 && f.Minimized && len(f.Lanes) == 2 {
				ok = true
			}
			g, err := m.Finding(ctx, f.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !g.Created.Equal(f.Created) {
				t.Errorf("finding %s: created %s, stored %s", f.ID, f.Created, g.Created)
			}
			g.Created = f.Created
			if g.Seen.Times < 1 {
				t.Errorf("finding %s: seen %+v, want counted", f.ID, g.Seen)
			}
			g.Seen = f.Seen // the ledger's count across runs, read with the finding
			if !reflect.DeepEqual(*g, f) {
				t.Errorf("Finding(%s):\n got %+v\nwant the last streamed %+v", f.ID, *g, f)
			}
		}
		if !ok {
			t.Error("no finding with a minimized, non-empty trace and both lanes' errnos")
		}
	})

	// Cancelled the moment the first finding arrives: the run stops, and
	// keeps what it found, as found.
	t.Run("Cancelled", func(t *testing.T) {
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		var msgs []session.Finding
		s, err := Run(cctx, m, Options{Workers: 1, Lanes: []string{"ext2", "vfat"}, Depth: 2, Branching: 10, Seed: 7, Policy: "metis"}, nil,
			func(f session.Finding) {
				msgs = append(msgs, f)
				stop()
			})
		if err != nil {
			t.Fatal(err)
		}
		report(t, s)
		if s.Stopped != explore.StopCancelled || s.Findings == 0 || len(msgs) != s.Findings {
			t.Errorf("summary %+v, %d findings streamed: want stopped %q with the findings so far", s, len(msgs), explore.StopCancelled)
		}
		fs, err := m.Findings(ctx, s.Session)
		if err != nil || len(fs) != s.Findings {
			t.Errorf("findings kept: %d, %v; want %d", len(fs), err, s.Findings)
		}
		for _, f := range fs {
			if f.Minimized || !reflect.DeepEqual(f.Trace, f.FoundTrace) {
				t.Errorf("finding %s of a cancelled run: %+v, want it as found", f.ID, f)
			}
		}
		in, err := m.Get(ctx, s.Session)
		if err != nil || in.State != session.StateEnded || in.Reason != "explore cancelled" {
			t.Errorf("session after cancel: %+v, %v", in, err)
		}
		if running, _ := m.List(ctx, false); len(running) != 0 {
			t.Errorf("%d sessions still running", len(running))
		}
		if errors.Is(cctx.Err(), context.Canceled) == false {
			t.Error("the run ended before the cancel")
		}
	})
}
