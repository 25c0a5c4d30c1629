package crashcheck

import (
	"context"
	"testing"
	"time"

	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// workload creates a directory and a file in it, writes it, renames it
// and fsyncs it: metadata in several blocks (bitmaps, inode table,
// directory blocks) and data, ending in a persistence point.
var workload = []string{"mkdir d 0755", "create d/f 0644", "write d/f 0 12288 0x55", "rename d/f g", "fsync g"}

// TestCrashStatesRealGuest runs the workload on ext2 and ext4 in the real
// guest and checks every crash state of each lane's write log on the host:
// the guest's filesystems send flushes (the log has them); ext2, with no
// journal, leaves crash states e2fsck calls dirty (the control: the
// machinery sees a crash bug); ext4 (data=ordered) leaves none once its
// journal is replayed, and every ext4 crash state after the fsync's
// flushes holds g as fsync'd (ext2's fsync does not make the rename's
// directory entry durable: its count is logged, not judged). minix's fsync
// writes g's inode and data, not the root's entry the rename made
// (family.FsyncNameless): its states after the fsync lack the name g, and
// that is counted as a name the fsync does not promise, never as lost.
func TestCrashStatesRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dirty := map[string][]Result{}
	sum, err := Run(ctx, m, Options{Lanes: []string{"ext2", "ext4", "minix"}, Setup: []string{"create seed 0644"}, Trace: workload,
		Crash: crash.Options{MaxSubset: 1, MaxStates: 48}}, Sinks{Result: func(r Result) {
		if r.Verdict != Clean {
			dirty[r.Lane] = append(dirty[r.Lane], r)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	for lane, ls := range sum.Lanes {
		t.Logf("%s: %d writes, %d flushes, %d states (truncated %v), %d not clean; %s; durability checked in %d, lost in %d, a name only in %d", lane, ls.Writes, ls.Flushes,
			ls.States, ls.Truncated, ls.Dirty, ls.Replay, ls.Durable, ls.Lost, ls.Unnamed)
		if ls.Writes == 0 || ls.Flushes == 0 || ls.States < 2 {
			t.Errorf("%s: %+v: want writes, flushes (the guest sends them) and crash states", lane, ls)
		}
	}
	t.Logf("%.1f crash states checked per second", sum.StatesPerSec)
	if len(dirty["ext2"]) == 0 {
		t.Error("ext2 (no journal): every crash state fsck-clean; the control wants some dirty")
	} else {
		t.Logf("ext2, first dirty state: %s\n%s", dirty["ext2"][0].State, dirty["ext2"][0].Output)
	}
	if ls := sum.Lanes["ext4"]; ls.Durable == 0 || ls.Lost != 0 {
		t.Errorf("ext4: durability checked in %d crash states, lost in %d: want checked, never lost", ls.Durable, ls.Lost)
	}
	if ls := sum.Lanes["minix"]; ls.Unnamed == 0 || ls.Lost != 0 || ls.Unnamed > ls.Durable {
		t.Errorf("minix: durability checked in %d crash states, lost in %d, a name only in %d: want the name g missing after the fsync, counted, never lost", ls.Durable, ls.Lost, ls.Unnamed)
	}
	if ls := sum.Lanes["ext4"]; ls.Unnamed != 0 {
		t.Errorf("ext4: %d crash states counted as losing only a name: its fsync promises names", ls.Unnamed)
	}
	for _, r := range dirty["ext4"] {
		t.Errorf("ext4 (journal replayed): crash state %d (%s) is %s:\n%s", r.Index, r.State, r.Verdict, r.Output)
	}
}

// TestAceWorkloadsRealGuest runs the first ace:seq1 workloads on ext4, each
// from the checkpoint in turn (the restore ends the previous write log):
// every one runs, logs writes, and leaves only clean crash states.
func TestAceWorkloadsRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	workloads := map[int]bool{}
	sum, err := Run(ctx, m, Options{Lanes: []string{"ext4"}, Workload: "ace:seq1", MaxWorkloads: 4, Crash: crash.Options{MaxSubset: 1}}, Sinks{Result: func(r Result) {
		workloads[r.Workload] = true
		if r.Verdict != Clean {
			t.Errorf("workload %d (%s), crash state %d (%s): %s\n%s", r.Workload, crash.Describe(r.Trace), r.Index, r.State, r.Verdict, r.Output)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ls := sum.Lanes["ext4"]
	t.Logf("ext4, 4 ace:seq1 workloads: %d writes, %d flushes, %d crash states in %s", ls.Writes, ls.Flushes, ls.States, sum.Elapsed)
	if sum.Workloads != 4 || !sum.Truncated || len(workloads) != 4 || ls.Writes == 0 {
		t.Errorf("summary %+v, lane %+v, results from workloads %v: want 4 workloads run, each with crash states", sum, ls, workloads)
	}
}

// TestAtomicityRealGuest: with the atomic check, every ext4 crash state of
// the workload, mounted, equals the lane's state at one of the trace's op
// boundaries (its journal commits whole transactions), and the state
// before any write equals the one before the trace. (btrfs has a state at
// none: its log tree makes g durable without the mkdir before it, which
// POSIX allows; docs/crash.md. TestClassAtomicity covers that class.)
func TestAtomicityRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var first []Result
	sum, err := Run(ctx, m, Options{Lanes: []string{"ext4"}, Setup: []string{"create seed 0644"}, Trace: workload, Atomic: true, Minimize: -1},
		Sinks{Result: func(r Result) {
			if r.Index == 0 {
				first = append(first, r)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ls := sum.Lanes["ext4"]
	t.Logf("ext4: %d of %d crash states at an op boundary", ls.AtBoundary, ls.Atomic)
	if ls.Atomic == 0 || ls.AtBoundary != ls.Atomic || sum.Findings != 0 {
		t.Errorf("ext4: %d of %d states at an op boundary, %d findings: want all, some compared, none", ls.AtBoundary, ls.Atomic, sum.Findings)
	}
	if len(first) != 1 || first[0].Atomicity != "op 0" {
		t.Errorf("the first state: %+v: want it at op 0, the state before the trace", first)
	}
}
