package session

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/vmm"
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
