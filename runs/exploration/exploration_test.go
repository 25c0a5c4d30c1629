package exploration

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// dyingMachine is a fakeMachine whose guest dies at the first operation
// that is not a mount or a fingerprint.
type dyingMachine struct{ *sessiontest.Machine }

func (d *dyingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	switch req.Op.(type) {
	case *agentv1.Request_Mount, *agentv1.Request_Fingerprint:
	default:
		d.Kill()
	}
	return d.Machine.Call(ctx, req)
}

func TestExploreBadInput(t *testing.T) {
	m, machines := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	ctx := context.Background()
	tests := []struct {
		name  string
		o     Options
		field string
	}{
		{"no lanes", Options{}, "lanes"},
		{"unknown fs", Options{Lanes: []string{"ext2", "zfs"}}, "lanes[1]"},
		{"depth", Options{Lanes: []string{"ext2"}, Depth: explore.MaxDepth + 1}, "depth"},
		{"negative depth", Options{Lanes: []string{"ext2"}, Depth: -1}, "depth"},
		{"branching", Options{Lanes: []string{"ext2"}, Branching: explore.MaxBranching + 1}, "branching"},
		{"max states", Options{Lanes: []string{"ext2"}, MaxStates: -1}, "max_states"},
		{"unknown op", Options{Lanes: []string{"ext2"}, Ops: []string{"mknod"}}, "ops"},
		{"op twice", Options{Lanes: []string{"ext2"}, Ops: []string{"metis", "sync", "sync"}}, "ops"},
		{"max duration", Options{Lanes: []string{"ext2"}, MaxDuration: -time.Second}, "max_duration"},
		{"time mode", Options{Lanes: []string{"ext2"}, TimeMode: 99}, "time_mode"},
		{"policy", Options{Lanes: []string{"ext2"}, Policy: "lenient"}, "policy"},
		{"memory", Options{Lanes: []string{"ext2"}, MemoryMiB: 1}, "memory_mib"},
		{"backend", Options{Lanes: []string{"ext2"}, Backend: "xen"}, "backend"},
		{"remount with two lanes", Options{Lanes: []string{"ext2", "ext4"}, Remount: true}, "remount"},
		{"fsck with two lanes", Options{Lanes: []string{"ext2", "ext4"}, Fsck: true}, "fsck"},
		{"fsck on vfat", Options{Lanes: []string{"vfat"}, Fsck: true}, "fsck"},
		{"revert", Options{Lanes: []string{"ext2"}, Revert: "snapshot"}, "revert"},
		{"shard past its count", Options{Lanes: []string{"ext2"}, Shard: explore.Shard{Index: 2, Count: 2}}, "shard"},
		{"shard below the depth", Options{Lanes: []string{"ext2"}, Depth: 2, Shard: explore.Shard{Count: 2, Depth: 3}}, "shard"},
		{"workers", Options{Lanes: []string{"ext2"}, Workers: MaxWorkers + 1}, "workers"},
		{"crash with the remount revert", Options{Lanes: []string{"ext2"}, Revert: RevertRemount, Crash: &CrashOptions{}}, "revert"},
		{"crash on vfat (no host fsck)", Options{Lanes: []string{"ext2", "vfat"}, Crash: &CrashOptions{}}, "lanes[1]"},
		{"crash bounds", Options{Lanes: []string{"ext2"}, Crash: &CrashOptions{Crash: crash.Options{MaxStates: -1}}}, "crash"},
		{"setup far write", Options{Lanes: []string{"ext2"}, Setup: []*agentv1.Request{{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: "f-00", Offset: 1 << 42, Size: 1}}}}}, "setup"},
		{"setup empty op", Options{Lanes: []string{"ext2"}, Setup: []*agentv1.Request{{}}}, "setup"},
		{"setup too long", Options{Lanes: []string{"ext2"}, Setup: slices.Repeat([]*agentv1.Request{{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d-00"}}}}, MaxSetup+1)}, "setup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(ctx, m, tt.o, nil, nil)
			sessiontest.WantErr(t, err, errkind.ErrInvalid, tt.field)
		})
	}
	if n := machines.Len(); n != 0 {
		t.Errorf("%d machines started for bad input, want 0", n)
	}
	if _, err := m.Finding(ctx, "f-000000000000"); !errors.Is(err, errkind.ErrNotFound) {
		t.Errorf("Finding(unknown) = %v, want errkind.ErrNotFound", err)
	}
	if _, err := m.Finding(ctx, ""); !errors.Is(err, errkind.ErrInvalid) {
		t.Errorf("Finding(\"\") = %v, want errkind.ErrInvalid", err)
	}
	if _, err := m.Findings(ctx, "s-000000000000"); !errors.Is(err, errkind.ErrNotFound) {
		t.Errorf("Findings(unknown session) = %v, want errkind.ErrNotFound", err)
	}
}

// TestExploreFake checks the control flow on the fake machine: every state
// looks the same (the fake returns no leaves), the session ends, the
// session is busy while the run lasts, and a guest that dies mid-run is a
// finding kept in the ledger, not an error.
func TestExploreFake(t *testing.T) {
	var dying bool // machines started from now on die at their first op
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine {
		if dying {
			return &dyingMachine{Machine: &sessiontest.Machine{}}
		}
		return &sessiontest.Machine{}
	})
	ctx := context.Background()
	var busy error
	sum, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2", "ext4"}, Depth: 2, Branching: 3, Seed: 7, Revert: RevertMachine},
		func(p Progress) {
			if busy == nil {
				running, err := m.List(ctx, false)
				if err != nil || len(running) != 1 {
					t.Errorf("List during the run: %v, %v", running, err)
					return
				}
				_, busy = m.Apply(ctx, running[0].ID, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
			}
		}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Branching 3 is below the fourteen Metis kinds: one op of each.
	if sum.States != len(explore.MetisOps) || sum.Unique != 1 || sum.Findings != 0 || sum.Stopped != "" || sum.Backend != "qemu" {
		t.Errorf("summary %+v: want %d states (one per Metis kind; every child equals the root), 1 unique, no findings", sum, len(explore.MetisOps))
	}
	if !errors.Is(busy, errkind.ErrState) {
		t.Errorf("Apply during the run: %v, want errkind.ErrState", busy)
	}
	in, err := m.Get(ctx, sum.Session)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != session.StateEnded || in.Reason != "explore finished" {
		t.Errorf("session %s (%s), want ended (explore finished)", in.State, in.Reason)
	}

	// A guest that dies at its first op.
	var got []session.Finding
	dying = true
	sum, err = Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2"}, Depth: 1, Branching: 2, Seed: 1<<63 + 5, Revert: RevertMachine}, nil,
		func(f session.Finding) { got = append(got, f) })
	if err != nil {
		t.Fatal(err)
	}
	if sum.Stopped != explore.StopGuestDied || len(got) != 1 || got[0].Kind != explore.KindGuestDied || len(got[0].Trace) != 1 {
		t.Fatalf("summary %+v, findings %+v: want one guest-died finding with a one-op trace", sum, got)
	}
	in, err = m.Get(ctx, sum.Session)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != session.StateFailed {
		t.Errorf("session %s (%s), want failed", in.State, in.Reason)
	}
	f, err := m.Finding(ctx, got[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Created.Equal(got[0].Created) || f.Seed != 1<<63+5 {
		t.Errorf("stored %+v, found %+v", f, got[0])
	}
	f.Created = got[0].Created
	// Seen is the ledger's count across runs, read with the finding.
	if f.Seen.Times != 1 || f.Seen.FirstID != f.ID {
		t.Errorf("stored %s seen %+v, want once, first itself", f.ID, f.Seen)
	}
	f.Seen = got[0].Seen
	if !reflect.DeepEqual(*f, got[0]) {
		t.Errorf("Finding round trip:\n got %+v\nwant %+v", *f, got[0])
	}
	all, err := m.Findings(ctx, "")
	if err != nil || len(all) != 1 || all[0].ID != f.ID {
		t.Errorf("Findings(\"\") = %v, %v; want the one finding", all, err)
	}
	mine, err := m.Findings(ctx, sum.Session)
	if err != nil || len(mine) != 1 {
		t.Errorf("Findings(%s) = %v, %v; want the one finding", sum.Session, mine, err)
	}
}

// syncingMachine is a fakeMachine that counts the fsync and sync requests
// (inside batches too).
type syncingMachine struct {
	*sessiontest.Machine
	fsyncs map[string]int // by lane
	syncs  int
}

func (c *syncingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	return sessiontest.Unbatch(ctx, req, func(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
		switch o := req.Op.(type) {
		case *agentv1.Request_Fsync:
			c.fsyncs[o.Fsync.GetLane()]++
		case *agentv1.Request_Sync:
			c.syncs++
		}
		return c.Machine.Call(ctx, req)
	})
}

// TestExplorePersistenceOps: the persistence kinds reach the guest when
// Options.Ops names them: fsync once per lane, sync (machine-wide) once for
// all lanes.
func TestExplorePersistenceOps(t *testing.T) {
	mach := &syncingMachine{Machine: &sessiontest.Machine{}, fsyncs: map[string]int{}}
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine { return mach })
	sum, err := Run(context.Background(), m, Options{Workers: 1, Lanes: []string{"ext2", "ext4"}, Depth: 1, Branching: 1, Seed: 3,
		Ops: []string{explore.OpFsync, explore.OpSync}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.States != 2 || mach.syncs != 1 || mach.fsyncs["ext2"] != 1 || mach.fsyncs["ext4"] != 1 || len(mach.fsyncs) != 2 {
		t.Errorf("%d states, %d syncs, fsyncs by lane %v: want 2 states, 1 sync, 1 fsync on each lane", sum.States, mach.syncs, mach.fsyncs)
	}
	evs, err := m.Events(context.Background(), sum.Session, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(evs, func(e session.Event) bool { return e.Kind == "explore.started" })
	if want := "ops fsync,sync (2 per state)"; i < 0 || !strings.Contains(evs[i].Detail, want) {
		t.Errorf("events %+v: want explore.started saying %q", evs, want)
	}
}

// divergingMachine is a fakeMachine on which mkdir fails with EPERM on the
// lane "ext4" only: every mkdir is an errno divergence.
type divergingMachine struct{ *sessiontest.Machine }

func (d *divergingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	return sessiontest.Unbatch(ctx, req, func(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
		if mk := req.GetMkdir(); mk != nil && mk.GetLane() == "ext4" {
			return &agentv1.Response{Errno: int32(syscall.EPERM), Error: "mkdir: operation not permitted"}, nil
		}
		return d.Machine.Call(ctx, req)
	})
}

// TestExploreFindingsStreamed: a finding reaches the caller (and the
// ledger) the moment the search finds it, with its trace as found, and once
// more, same id, with the minimized trace after the search.
func TestExploreFindingsStreamed(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine {
		return &divergingMachine{Machine: &sessiontest.Machine{}}
	})
	ctx := context.Background()
	var got []session.Finding
	progressAfter := map[string]int{} // finding id -> progress calls after it was first sent
	sum, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2", "ext4"}, Depth: 2, Branching: 20, Seed: 7},
		func(Progress) {
			for id := range progressAfter {
				progressAfter[id]++
			}
		},
		func(f session.Finding) {
			got = append(got, f)
			if !f.Minimized {
				progressAfter[f.ID] = 0
				// Stored before it is sent.
				stored, err := m.Finding(ctx, f.ID)
				if err != nil || stored.Minimized || !reflect.DeepEqual(stored.Trace, f.Trace) {
					t.Errorf("finding %s when sent: stored %+v, %v", f.ID, stored, err)
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("%d finding messages %+v, want the finding and its minimized update", len(got), got)
	}
	first := map[string]session.Finding{}
	var order []string
	for _, f := range got {
		t.Logf("%s minimized=%v dup=%q trace %v (found %v): %s", f.ID, f.Minimized, f.DuplicateOf, f.Trace, f.FoundTrace, f.Detail)
		a, seen := first[f.ID]
		if !seen {
			if f.Minimized || !reflect.DeepEqual(f.Trace, f.FoundTrace) || len(f.Trace) != f.OriginalLen || f.Kind != explore.KindErrno {
				t.Errorf("first message of %s: %+v, want the errno divergence as found", f.ID, f)
			}
			first[f.ID] = f
			order = append(order, f.ID)
			continue
		}
		// The found trace becomes the canonical one: never longer than
		// the first sighting's.
		if !f.Minimized || len(f.Trace) != 1 || !strings.HasPrefix(f.Trace[0], "mkdir ") || len(f.FoundTrace) == 0 ||
			len(f.FoundTrace) > len(a.FoundTrace) || f.OriginalLen != len(f.FoundTrace) || !f.Created.Equal(a.Created) || f.Signature == "" {
			t.Errorf("update of %s: %+v, want the one-op minimized trace, the canonical found trace and the signature", f.ID, f)
		}
		stored, err := m.Finding(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		stored.Created = f.Created
		if stored.Seen.Times != 1 {
			t.Errorf("stored %s seen %+v, want once", f.ID, stored.Seen)
		}
		stored.Seen = f.Seen // the ledger's count across runs, read with the finding
		if !reflect.DeepEqual(*stored, f) {
			t.Errorf("Finding(%s) after the run:\n got %+v\nwant %+v", f.ID, *stored, f)
		}
	}
	if sum.Findings != len(order) {
		t.Errorf("summary counts %d findings, %d sent", sum.Findings, len(order))
	}
	for id, n := range progressAfter {
		if n == 0 {
			t.Errorf("finding %s: no progress after it was sent; want it sent during the search", id)
		}
	}
	all, err := m.Findings(ctx, sum.Session)
	if err != nil || len(all) != len(order) {
		t.Errorf("Findings(%s): %d, %v; want %d", sum.Session, len(all), err, len(order))
	}
}

// TestExploreSetup: the setup's ops run before the root on every lane,
// every finding's trace (as found and minimized) starts with them, and a
// setup op that fails on a lane fails the run, naming the op and lane.
func TestExploreSetup(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine {
		return &divergingMachine{Machine: &sessiontest.Machine{}}
	})
	ctx := context.Background()
	setup := []*agentv1.Request{
		{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: "f-00", Flags: 0o102, Size: 1000, Fill: 0x61}}},
		{Op: &agentv1.Request_Create{Create: &agentv1.Create{Path: "f-01", Flags: 0o101, Mode: 0o644}}},
	}
	want := opspec.FormatTrace(setup)
	var got []session.Finding
	sum, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2", "ext4"}, Depth: 1, Branching: 20, Seed: 7, Setup: setup}, nil,
		func(f session.Finding) { got = append(got, f) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || sum.Findings == 0 {
		t.Fatalf("%d findings sent (summary %d): want the mkdir divergence", len(got), sum.Findings)
	}
	for _, f := range got {
		if !slices.Equal(f.Trace[:min(len(want), len(f.Trace))], want) || len(f.Trace) != len(want)+1 ||
			!slices.Equal(f.FoundTrace[:len(want)], want) || f.OriginalLen != len(f.FoundTrace) {
			t.Errorf("finding %s: trace %q (found %q, %d ops), want the setup %q and then the op", f.ID, f.Trace, f.FoundTrace, f.OriginalLen, want)
		}
	}
	_, err = Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2", "ext4"}, Depth: 1, Setup: []*agentv1.Request{{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d-00", Mode: 0o755}}}}}, nil, nil)
	if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), "explore: setup: op 1 (mkdir d-00 0755) failed on lane ext4") {
		t.Errorf("a setup op failing on lane ext4: %v, want it named", err)
	}
	// A setup may end in a sync (a durable root); it is not under test:
	// under --crash no point is checked when the search's ops have no
	// persistence op. (populate applies the setup without crash states,
	// which matters for a replaced worker's System: the first ones get the
	// run's crash state after their setup.)
	synced := append(slices.Clone(setup), &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
	sum, err = Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2"}, Depth: 1, Branching: 4, Ops: []string{explore.OpMkdir}, Seed: 7, Setup: synced, Crash: &CrashOptions{}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Crash == nil || sum.Crash.Points != 0 || sum.Crash.Repeats != 0 || sum.Crash.Unlogged != 0 {
		t.Errorf("crash counts %+v after a setup ending in sync: want no point checked", sum.Crash)
	}
}

// TestSeedTreeInPool: every seed tree names only paths of explore's default
// pool (files as files, dirs as dirs), so that the ops explore draws reach
// them.
func TestSeedTreeInPool(t *testing.T) {
	t.Parallel()
	files, dirs := explore.DefaultPool.Paths()
	for n := 1; n <= guest.MaxSeed; n++ {
		for _, e := range guest.SeedTree(n) {
			pool := files
			if e.Dir {
				pool = dirs
			}
			if !slices.Contains(pool, e.Path) {
				t.Errorf("seed=%d: %s (dir %v) is not in explore's pool", n, e.Path, e.Dir)
			}
		}
	}
}

// TestCrashPointClaim: a crash point (path and op) is checked once; a
// point whose check lost the guest is unclaimed and checked again by the
// next replay of its path (a hung task's confirmation, minimization).
func TestCrashPointClaim(t *testing.T) {
	cr := &crashRun{seen: map[string]bool{}}
	path, err := opspec.ParseTrace([]string{"mkdir d-00 0755", "create d-00/f-00 0644"})
	if err != nil {
		t.Fatal(err)
	}
	op, other := &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}, &agentv1.Request{Op: &agentv1.Request_Fsync{Fsync: &agentv1.Fsync{Path: "d-00/f-00"}}}
	steps := []struct {
		claim bool // claim (else unclaim)
		op    *agentv1.Request
		want  bool
	}{{true, op, true}, {true, op, false}, {true, other, true}, {false, op, false}, {true, op, true}, {true, other, false}}
	for i, s := range steps {
		if !s.claim {
			cr.unclaim(path, s.op)
			continue
		}
		if got := cr.claim(path, s.op); got != s.want {
			t.Errorf("step %d: claim %s = %v, want %v", i, explore.OpKind(s.op), got, s.want)
		}
	}
	if cr.counts.Repeats != 2 {
		t.Errorf("%d repeats, want 2", cr.counts.Repeats)
	}
}

// TestCrashFindingsInProgress: progress counts --crash's findings with the
// search's (a crash part showed "findings 0" while its findings arrived);
// a run without --crash adds none.
func TestCrashFindingsInProgress(t *testing.T) {
	var none *crashRun
	cr := &crashRun{seen: map[string]bool{}}
	cr.count(func(c *CrashCounts) { c.Findings += 2 })
	for _, tc := range []struct {
		name string
		cr   *crashRun
		want int
	}{{"no --crash", none, 0}, {"two recorded", cr, 2}} {
		if got := tc.cr.findings(); got != tc.want {
			t.Errorf("%s: findings %d, want %d", tc.name, got, tc.want)
		}
	}
}
