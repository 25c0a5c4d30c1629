package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/session"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDiffRPCSides: the request's fields reach the domain as the two sides,
// unfilled (the domain defaults session_b and lane_b).
func TestDiffRPCSides(t *testing.T) {
	t.Parallel()
	f := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, f))
	for _, tt := range []struct {
		name string
		req  *themisv1.DiffRequest
		want [2]session.DiffSide
	}{
		{"one lane", &themisv1.DiffRequest{SessionId: "s-1", Lane: "ext2", From: "c-1", To: "current"},
			[2]session.DiffSide{{Session: "s-1", Lane: "ext2", At: "c-1"}, {At: "current"}}},
		{"two sessions", &themisv1.DiffRequest{SessionId: "s-1", Lane: "ext2", From: "current", To: "current", SessionB: "s-2"},
			[2]session.DiffSide{{Session: "s-1", Lane: "ext2", At: "current"}, {Session: "s-2", At: "current"}}},
		{"two lanes of two sessions", &themisv1.DiffRequest{SessionId: "s-1", Lane: "ext2", From: "c-1", To: "c-2", SessionB: "s-2", LaneB: "b"},
			[2]session.DiffSide{{Session: "s-1", Lane: "ext2", At: "c-1"}, {Session: "s-2", Lane: "b", At: "c-2"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.Diff(context.Background(), tt.req); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			got := f.diff
			f.mu.Unlock()
			if got != tt.want {
				t.Errorf("domain got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestCrashRPC: the request's fields reach the domain (crash_writes as
// the subset bound), each state streams with its in-flight writes, then
// the summary per lane.
func TestCrashRPC(t *testing.T) {
	t.Parallel()
	f := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, f))
	stream, err := c.Crash(context.Background(), &themisv1.CrashRequest{Lanes: []string{"ext2"}, Trace: []string{"fsync"}, CrashWrites: -1, MaxStates: 9,
		NoSetupSync: true, Only: &themisv1.CrashKeep{Keep: []int32{0, 2}}, StreamImage: true, Image: "exfat-off-by-one", Minimize: -1})
	if err != nil {
		t.Fatal(err)
	}
	var res []*themisv1.CrashResult
	var sum *themisv1.CrashSummary
	var fs []*themisv1.Finding
	var chunks []*themisv1.CrashImageChunk
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if x := r.GetResult(); x != nil {
			res = append(res, x)
		}
		if s := r.GetSummary(); s != nil {
			sum = s
		}
		if f := r.GetFinding(); f != nil {
			fs = append(fs, f)
		}
		if x := r.GetImage(); x != nil {
			chunks = append(chunks, x)
		}
	}
	if len(fs) != 1 || fs[0].GetKind() != "crash" || !slices.Equal(fs[0].GetCrash().GetKeep(), []int32{0, 2, 5}) || sum.GetFindings() != 1 {
		t.Errorf("findings %v (summary %v): want the crash finding with its write subset", fs, sum)
	}
	if len(chunks) != 1 || chunks[0].GetOffset() != 4096 || chunks[0].GetSize() != 8192 || len(chunks[0].GetData()) != 2 {
		t.Errorf("image chunks %v", chunks)
	}
	if len(res) != 1 || !slices.Equal(res[0].GetInFlight(), []int32{5}) || res[0].GetVerdict() != "dirty" || res[0].GetFlushes() != 1 {
		t.Errorf("results %v: want one dirty state keeping in-flight write 5", res)
	}
	if sum == nil || len(sum.GetLanes()) != 1 || sum.GetLanes()[0].GetNotClean() != 1 || sum.GetLanes()[0].GetWrites() != 6 {
		t.Errorf("summary %v", sum)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crash.Crash.MaxSubset != -1 || f.crash.Crash.MaxStates != 9 || !slices.Equal(f.crash.Trace, []string{"fsync"}) ||
		!f.crash.NoSetupSync || !slices.Equal(f.crash.Only, []int{0, 2}) || !f.crash.StreamImage || f.crash.Image != "exfat-off-by-one" || f.crash.Minimize != -1 {
		t.Errorf("domain got %+v", f.crash)
	}
}

// TestCheckRPC: the request's fields reach the domain, each part streams
// its start (skipped parts only their end), events named by their part,
// and the summary with every part; bad fields are refused by name.
func TestCheckRPC(t *testing.T) {
	t.Parallel()
	f := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, f))
	for _, tc := range []struct {
		req   *themisv1.CheckRequest
		field string
	}{
		{&themisv1.CheckRequest{}, "lanes"},
		{&themisv1.CheckRequest{Lanes: []string{"exfat"}, BudgetSeconds: -1}, "budget_seconds"},
		{&themisv1.CheckRequest{Lanes: []string{"exfat"}, Depth: 11}, "depth"},
		{&themisv1.CheckRequest{Lanes: []string{"exfat"}, Workers: -2}, "workers"},
	} {
		stream, err := c.Check(context.Background(), tc.req)
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: err %v, want InvalidArgument naming %s", tc.req, err, tc.field)
		}
	}
	stream, err := c.Check(context.Background(), &themisv1.CheckRequest{Lanes: []string{"exfat"}, Reference: "none", Image: "bug-x",
		BudgetSeconds: 90, Depth: 4, Seed: 9, Workers: 2, Parts: []string{"clock", "differential"}})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	var sum *themisv1.CheckSummary
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.GetPartStarted() != nil:
			events = append(events, "start "+r.GetPart())
		case r.GetCell() != nil:
			events = append(events, "cell "+r.GetPart()+" "+r.GetCell().GetOp())
		case r.GetProgress() != nil:
			events = append(events, "progress "+r.GetPart())
		case r.GetFinding() != nil:
			events = append(events, "finding "+r.GetPart()+" "+r.GetFinding().GetId())
		case r.GetPartDone() != nil:
			events = append(events, "done "+r.GetPart()+" "+r.GetPartDone().GetSkipped())
		case r.GetSummary() != nil:
			sum = r.GetSummary()
		}
	}
	want := []string{"start clock exfat", "cell clock exfat mkdir", "done clock exfat ",
		"start differential exfat,ext2", "progress differential exfat,ext2", "finding differential exfat,ext2 f-d", "done differential exfat,ext2 ",
		"done crash exfat lane exfat has no host checker"}
	if !slices.Equal(events, want) {
		t.Errorf("events\n%q\nwant\n%q", events, want)
	}
	if sum.GetFindings() != 2 || len(sum.GetParts()) != 3 || sum.GetParts()[1].GetExplore().GetSessionId() != "s-2" ||
		sum.GetParts()[0].GetCells()[0].GetExpected() != "represented" || sum.GetBudgetS() != 90 || sum.GetReference() != "ext2" ||
		len(sum.GetFound()) != 1 || sum.GetFound()[0].GetId() != "f-d" {
		t.Errorf("summary %v", sum)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.check; o.Reference != "none" || o.Image != "bug-x" || o.Budget != 90*time.Second || o.Depth != 4 || o.Seed != 9 || o.Workers != 2 ||
		!slices.Equal(o.Kinds, []string{"clock", "differential"}) {
		t.Errorf("domain got %+v", o)
	}
}
