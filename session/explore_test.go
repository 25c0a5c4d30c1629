package session

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
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/vmm"
	"google.golang.org/protobuf/proto"
)

// dyingMachine is a fakeMachine whose guest dies at the first operation
// that is not a mount or a fingerprint.
type dyingMachine struct{ *fakeMachine }

func (d *dyingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	switch req.Op.(type) {
	case *agentv1.Request_Mount, *agentv1.Request_Fingerprint:
	default:
		d.mu.Lock()
		d.dead = true
		d.mu.Unlock()
	}
	return d.fakeMachine.Call(ctx, req)
}

func TestExploreBadInput(t *testing.T) {
	m, machines := fakeManager(t, t.TempDir(), Config{})
	ctx := context.Background()
	tests := []struct {
		name  string
		o     ExploreOptions
		field string
	}{
		{"no lanes", ExploreOptions{}, "lanes"},
		{"unknown fs", ExploreOptions{Lanes: []string{"ext2", "zfs"}}, "lanes[1]"},
		{"depth", ExploreOptions{Lanes: []string{"ext2"}, Depth: explore.MaxDepth + 1}, "depth"},
		{"negative depth", ExploreOptions{Lanes: []string{"ext2"}, Depth: -1}, "depth"},
		{"branching", ExploreOptions{Lanes: []string{"ext2"}, Branching: explore.MaxBranching + 1}, "branching"},
		{"max states", ExploreOptions{Lanes: []string{"ext2"}, MaxStates: -1}, "max_states"},
		{"max duration", ExploreOptions{Lanes: []string{"ext2"}, MaxDuration: -time.Second}, "max_duration"},
		{"time mode", ExploreOptions{Lanes: []string{"ext2"}, TimeMode: 99}, "time_mode"},
		{"policy", ExploreOptions{Lanes: []string{"ext2"}, Policy: "lenient"}, "policy"},
		{"memory", ExploreOptions{Lanes: []string{"ext2"}, MemoryMiB: 1}, "memory_mib"},
		{"backend", ExploreOptions{Lanes: []string{"ext2"}, Backend: "xen"}, "backend"},
		{"remount with two lanes", ExploreOptions{Lanes: []string{"ext2", "ext4"}, Remount: true}, "remount"},
		{"fsck with two lanes", ExploreOptions{Lanes: []string{"ext2", "ext4"}, Fsck: true}, "fsck"},
		{"fsck on vfat", ExploreOptions{Lanes: []string{"vfat"}, Fsck: true}, "fsck"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Explore(ctx, tt.o, nil, nil)
			wantErr(t, err, ErrInvalid, tt.field)
		})
	}
	if n := len(*machines); n != 0 {
		t.Errorf("%d machines started for bad input, want 0", n)
	}
	if _, err := m.Finding(ctx, "f-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Finding(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := m.Finding(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Finding(\"\") = %v, want ErrInvalid", err)
	}
	if _, err := m.Findings(ctx, "s-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Findings(unknown session) = %v, want ErrNotFound", err)
	}
}

// TestExploreFake checks the control flow on the fake machine: every state
// looks the same (the fake returns no leaves), the session ends, the
// session is busy while the run lasts, and a guest that dies mid-run is a
// finding kept in the ledger, not an error.
func TestExploreFake(t *testing.T) {
	m, _ := fakeManager(t, t.TempDir(), Config{})
	ctx := context.Background()
	var busy error
	sum, err := m.Explore(ctx, ExploreOptions{Lanes: []string{"ext2", "ext4"}, Depth: 2, Branching: 3, Seed: 7},
		func(p ExploreProgress) {
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
	if sum.States != 3 || sum.Unique != 1 || sum.Findings != 0 || sum.Stopped != "" || sum.Backend != "qemu" {
		t.Errorf("summary %+v: want 3 states (every child equals the root), 1 unique, no findings", sum)
	}
	if !errors.Is(busy, ErrState) {
		t.Errorf("Apply during the run: %v, want ErrState", busy)
	}
	in, err := m.Get(ctx, sum.Session)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != StateEnded || in.Reason != "explore finished" {
		t.Errorf("session %s (%s), want ended (explore finished)", in.State, in.Reason)
	}

	// A guest that dies at its first op.
	var got []Finding
	m.cfg.Start = func(ctx context.Context, c vmm.Config) (vmm.Machine, error) {
		return &dyingMachine{fakeMachine: &fakeMachine{}}, nil
	}
	sum, err = m.Explore(ctx, ExploreOptions{Lanes: []string{"ext2"}, Depth: 1, Branching: 2, Seed: 1<<63 + 5}, nil,
		func(f Finding) { got = append(got, f) })
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
	if in.State != StateFailed {
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

// divergingMachine is a fakeMachine on which mkdir fails with EPERM on the
// lane "ext4" only: every mkdir is an errno divergence.
type divergingMachine struct{ *fakeMachine }

func (d *divergingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if mk := req.GetMkdir(); mk != nil && mk.GetLane() == "ext4" {
		return &agentv1.Response{Errno: int32(syscall.EPERM), Error: "mkdir: operation not permitted"}, nil
	}
	return d.fakeMachine.Call(ctx, req)
}

// TestExploreFindingsStreamed: a finding reaches the caller (and the
// ledger) the moment the search finds it, with its trace as found, and once
// more, same id, with the minimized trace after the search.
func TestExploreFindingsStreamed(t *testing.T) {
	m, _ := fakeManager(t, t.TempDir(), Config{})
	m.cfg.Start = func(ctx context.Context, c vmm.Config) (vmm.Machine, error) {
		return &divergingMachine{fakeMachine: &fakeMachine{}}, nil
	}
	ctx := context.Background()
	var got []Finding
	progressAfter := map[string]int{} // finding id -> progress calls after it was first sent
	sum, err := m.Explore(ctx, ExploreOptions{Lanes: []string{"ext2", "ext4"}, Depth: 2, Branching: 20, Seed: 7},
		func(ExploreProgress) {
			for id := range progressAfter {
				progressAfter[id]++
			}
		},
		func(f Finding) {
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
	first := map[string]Finding{}
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
		if !f.Minimized || len(f.Trace) != 1 || !strings.HasPrefix(f.Trace[0], "mkdir ") || !reflect.DeepEqual(f.FoundTrace, a.FoundTrace) || !f.Created.Equal(a.Created) {
			t.Errorf("update of %s: %+v, want the one-op minimized trace, found trace kept", f.ID, f)
		}
		stored, err := m.Finding(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		stored.Created = f.Created
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

// TestOverlayLaneFake: an overlay lane gets two disks (upper lane<i>, lower
// lower<i>), is mounted as overlayfs with metacopy=off, and is fingerprinted
// from below as well.
func TestOverlayLaneFake(t *testing.T) {
	m, _ := fakeManager(t, t.TempDir(), Config{})
	var cfgs []vmm.Config
	var mounts []*agentv1.Mount
	var below []string
	m.cfg.Start = func(ctx context.Context, c vmm.Config) (vmm.Machine, error) {
		cfgs = append(cfgs, c)
		return &recordingMachine{fakeMachine: &fakeMachine{}, mounts: &mounts, below: &below}, nil
	}
	ctx := context.Background()
	in, err := m.Create(ctx, CreateOptions{Lanes: []string{"ext2", "overlay:name=ov"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, in.ID)
	var serials []string
	for _, d := range cfgs[0].Disks {
		serials = append(serials, d.Serial)
	}
	if want := []string{"lane0", "lane1", "lower1"}; !reflect.DeepEqual(serials, want) {
		t.Errorf("disks %v, want %v", serials, want)
	}
	want := &agentv1.Mount{Lane: "ov", Device: "serial:lane1", LowerDevice: "serial:lower1", Fstype: "overlay", LayerFstype: "ext2", Options: OverlayMountOptions}
	if len(mounts) != 2 || !proto.Equal(mounts[1], want) || mounts[0].GetLowerDevice() != "" {
		t.Errorf("mounts %v, want the ext2 lane plain and %v", mounts, want)
	}
	if !strings.Contains(OverlayMountOptions, "metacopy=off") {
		t.Errorf("overlay options %q without metacopy=off", OverlayMountOptions)
	}
	fps, err := m.Fingerprint(ctx, in.ID, agentv1.TimeMode_TIME_MODE_NONE, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fps) != 2 || fps[0].BelowRoot != nil || fps[1].BelowRoot == nil || !reflect.DeepEqual(below, []string{"ov"}) {
		t.Errorf("fingerprints %+v (below asked of %v): want a root from below for the overlay lane only", fps, below)
	}

	// The disks' images: without a seed both layers are the empty ext2;
	// with seed=1 the lower layer is an ext2:seed=1 lane's image and the
	// upper one stays empty.
	hashes := func(lanes ...string) map[string][32]byte {
		t.Helper()
		cfgs = nil
		in, err := m.Create(ctx, CreateOptions{Lanes: lanes})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Delete(ctx, in.ID)
		out := make(map[string][32]byte)
		for _, d := range cfgs[0].Disks {
			h, err := d.Device.Hash()
			if err != nil {
				t.Fatal(err)
			}
			out[d.Serial] = h
		}
		return out
	}
	if h := hashes("ext2", "overlay"); h["lane0"] != h["lane1"] || h["lane1"] != h["lower1"] {
		t.Error("unseeded overlay lane: want both layers the empty ext2 image")
	}
	if h := hashes("ext2:seed=1", "overlay:seed=1", "ext2:name=empty"); h["lane0"] != h["lower1"] || h["lane1"] != h["lane2"] || h["lane1"] == h["lower1"] {
		t.Error("overlay:seed=1: want the lower layer ext2:seed=1's image and the upper layer the empty ext2")
	}
}

// recordingMachine is a fakeMachine that records Mount requests and the
// lanes fingerprinted from below.
type recordingMachine struct {
	*fakeMachine
	mounts *[]*agentv1.Mount
	below  *[]string
}

func (r *recordingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if mt := req.GetMount(); mt != nil {
		*r.mounts = append(*r.mounts, mt)
	}
	if fp := req.GetFingerprint(); fp.GetBelow() {
		*r.below = append(*r.below, fp.GetLane())
	}
	return r.fakeMachine.Call(ctx, req)
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
