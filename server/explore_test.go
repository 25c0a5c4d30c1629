package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/runs/exploration"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestExploreStream(t *testing.T) {
	t.Parallel()
	d := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, d))
	ctx := context.Background()
	stream, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{"ext2", "ext4"}, Depth: 2, Ops: []string{"metis", "fsync"}})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var sum *themisv1.ExploreSummary
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e := r.GetEvent().(type) {
		case *themisv1.ExploreResponse_Progress:
			kinds = append(kinds, "progress")
		case *themisv1.ExploreResponse_Finding:
			f := e.Finding
			kinds = append(kinds, fmt.Sprintf("finding %s minimized=%v trace=%q found=%q", f.GetId(), f.GetMinimized(), f.GetTrace(), f.GetFoundTrace()))
		case *themisv1.ExploreResponse_Summary:
			kinds = append(kinds, "summary")
			sum = e.Summary
		}
	}
	// The finding as found, then its minimized update with the same id.
	want := []string{"progress",
		`finding f-1 minimized=false trace=["chmod d 0700" "mkdir d 0755"] found=["chmod d 0700" "mkdir d 0755"]`,
		`finding f-1 minimized=true trace=["mkdir d 0755"] found=["chmod d 0700" "mkdir d 0755"]`,
		"summary"}
	if !slices.Equal(kinds, want) {
		t.Errorf("stream events\n%q\nwant\n%q", kinds, want)
	}
	if sum.GetUniqueStates() != 2 || sum.GetRoots()[0].GetLane() != "a" {
		t.Errorf("summary %v", sum)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if got := d.explore; got.Depth != 2 || !slices.Equal(got.Ops, []string{"metis", "fsync"}) {
		t.Errorf("domain got depth %d, ops %q; want 2, [metis fsync]", got.Depth, got.Ops)
	}
}

// TestGetExploreRun: the run's record comes back as the request it ran,
// its summary and progress; no session id is INVALID_ARGUMENT naming the
// field, a session without a record NOT_FOUND.
func TestGetExploreRun(t *testing.T) {
	t.Parallel()
	d := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, d))
	ctx := context.Background()
	stream, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{"ext2", "ext4"}, Depth: 2, Seed: 9, Ops: []string{"metis"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.GetExploreRun(ctx, &themisv1.GetExploreRunRequest{SessionId: "s-1"})
	if err != nil {
		t.Fatal(err)
	}
	if q := r.GetRequest(); !slices.Equal(q.GetLanes(), []string{"ext2", "ext4"}) || q.GetDepth() != 2 || q.GetSeed() != 9 {
		t.Errorf("request %v, want lanes a,b depth 2 seed 9", q)
	}
	if s := r.GetSummary(); s.GetUniqueStates() != 2 || !slices.Equal(s.GetUniqueByDepth(), []int64{1, 1}) {
		t.Errorf("summary %v", s)
	}
	if p := r.GetProgress(); len(p) != 2 || p[1].GetElapsedS() != 1 {
		t.Errorf("progress %v", p)
	}
	for _, tt := range []struct {
		id   string
		code codes.Code
		want string
	}{{"", codes.InvalidArgument, "session_id"}, {"s-9", codes.NotFound, "s-9"}} {
		_, err := c.GetExploreRun(ctx, &themisv1.GetExploreRunRequest{SessionId: tt.id})
		if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("session %q: %v, want %v naming %q", tt.id, err, tt.code, tt.want)
		}
	}
}

func TestExploreBadInput(t *testing.T) {
	t.Parallel()
	c := themisv1.NewThemisClient(serve(t, &fakeDomain{}))
	tests := []struct {
		req   *themisv1.ExploreRequest
		field string
	}{
		{&themisv1.ExploreRequest{}, "lanes"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Depth: 11}, "depth"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Branching: -1}, "branching"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, MaxStates: -5}, "max_states"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, MaxSeconds: -1}, "max_seconds"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Setup: slices.Repeat([]string{"mkdir d-00"}, exploration.MaxSetup+1)}, "setup"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Setup: []string{"mknod d-00"}}, "setup"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Workers: -1}, "workers"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Workers: exploration.MaxWorkers + 1}, "workers"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Ops: []string{"mknod"}}, "ops"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Policy: "lenient"}, "policy"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2", "zfs"}}, "lanes[1]"},
		{&themisv1.ExploreRequest{Lanes: []string{"ext2", "ext4"}, Remount: true}, "remount"},
	}
	for _, tt := range tests {
		stream, err := c.Explore(context.Background(), tt.req)
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.field) {
			t.Errorf("Explore(%v): %v, want InvalidArgument naming %q", tt.req, err, tt.field)
		}
	}
	if _, err := c.GetFinding(context.Background(), &themisv1.GetFindingRequest{FindingId: "f-nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetFinding unknown: %v, want NotFound", err)
	}
	if _, err := c.GetFinding(context.Background(), &themisv1.GetFindingRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetFinding without id: %v, want InvalidArgument", err)
	}
}

// TestSetFindingStatus: a status is checked at the edge, naming the
// field, before the domain is called; an unknown finding is NotFound; a
// good one comes back with its status and when it was said.
func TestSetFindingStatus(t *testing.T) {
	t.Parallel()
	d := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, d))
	ctx := context.Background()
	for _, tt := range []struct {
		req   *themisv1.SetFindingStatusRequest
		field string
	}{
		{&themisv1.SetFindingStatusRequest{Status: "reported"}, "finding_id"},
		{&themisv1.SetFindingStatusRequest{FindingId: "f-1", Status: "fixed"}, "status"},
		{&themisv1.SetFindingStatusRequest{FindingId: "f-1"}, "status"},
	} {
		_, err := c.SetFindingStatus(ctx, tt.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tt.field+": ") {
			t.Errorf("SetFindingStatus(%v): %v, want InvalidArgument naming %s", tt.req, err, tt.field)
		}
	}
	if slices.Contains(d.Calls(), "SetFindingStatus") {
		t.Errorf("a bad request reached the domain: %v", d.Calls())
	}
	if _, err := c.SetFindingStatus(ctx, &themisv1.SetFindingStatusRequest{FindingId: "f-nope", Status: "expected"}); status.Code(err) != codes.NotFound {
		t.Errorf("an unknown finding: %v, want NotFound", err)
	}
	resp, err := c.SetFindingStatus(ctx, &themisv1.SetFindingStatusRequest{FindingId: "f-1", Status: "fixed-upstream"})
	if err != nil || resp.GetFinding().GetStatus() != "fixed-upstream" || resp.GetFinding().GetStatusTime() == nil {
		t.Errorf("SetFindingStatus: %v, %v; want the finding, fixed-upstream, with its time", resp, err)
	}
}

func TestClockSweepStream(t *testing.T) {
	t.Parallel()
	c := themisv1.NewThemisClient(serve(t, &fakeDomain{}))
	stream, err := c.ClockSweep(context.Background(), &themisv1.ClockSweepRequest{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	var cells int
	var sum *themisv1.SweepSummary
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.GetCell() != nil {
			cells++
			if r.GetCell().GetClampedTo() != 1<<31-1 {
				t.Errorf("cell %v", r.GetCell())
			}
		}
		if r.GetSummary() != nil {
			sum = r.GetSummary()
		}
	}
	if cells != 1 || sum.GetByVerdict()["clamped"] != 1 {
		t.Errorf("cells %d, summary %v", cells, sum)
	}
	for _, bad := range []*themisv1.ClockSweepRequest{
		{},
		{Lanes: []string{"ext2"}, PlanJson: []byte(`{"values":[{"name":"x","sec":1}],"bogus":1}`)},
	} {
		s, err := c.ClockSweep(context.Background(), bad)
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("ClockSweep(%v): %v, want InvalidArgument", bad, err)
		}
	}
}

func TestProfileAndCorruptStreams(t *testing.T) {
	t.Parallel()
	c := themisv1.NewThemisClient(serve(t, &fakeDomain{}))
	ps, err := c.Profile(context.Background(), &themisv1.ProfileRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var rows int
	var psum *themisv1.ProfileSummary
	for {
		r, err := ps.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if row := r.GetRow(); row != nil {
			rows++
			if row.GetWrittenLbas()[0].GetRegion() != "inode-table" {
				t.Errorf("row %v", row)
			}
		}
		if s := r.GetSummary(); s != nil {
			psum = s
		}
	}
	if rows != 1 || len(psum.GetLayouts()) != 1 || psum.GetLayouts()[0].GetInferred()[0].GetFirst() != 14 {
		t.Errorf("profile: %d rows, summary %v", rows, psum)
	}
	cs, err := c.Corrupt(context.Background(), &themisv1.CorruptRequest{Targets: []string{"superblock.magic"}})
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	for {
		r, err := cs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if res := r.GetResult(); res != nil {
			classes = append(classes, res.GetClass())
		}
		if s := r.GetSummary(); s != nil && s.GetByClass()["fatal"] != 1 {
			t.Errorf("corrupt summary %v", s)
		}
	}
	if len(classes) != 1 || classes[0] != "fatal" {
		t.Errorf("corrupt classes %v", classes)
	}
}

func TestDiffRPC(t *testing.T) {
	t.Parallel()
	c := themisv1.NewThemisClient(serve(t, &fakeDomain{}))
	d, err := c.Diff(context.Background(), &themisv1.DiffRequest{SessionId: "s-1", Lane: "ext2", From: "c-1", To: "current", Normalize: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetRawSectors() != 3 || d.GetNormalizedSectors() != 1 || !d.GetNormalized() || d.GetRanges()[0].GetRegion() != "inode-table" {
		t.Errorf("diff %v", d)
	}
	for _, req := range []*themisv1.DiffRequest{
		{Lane: "ext2", From: "a", To: "b"},
		{SessionId: "s-1", From: "a", To: "b"},
		{SessionId: "s-1", Lane: "ext2", To: "b"},
		{SessionId: "s-1", Lane: "ext2", From: "a"},
	} {
		if _, err := c.Diff(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Diff(%v): %v, want InvalidArgument", req, err)
		}
	}
}
