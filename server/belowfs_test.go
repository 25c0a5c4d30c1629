package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/session"
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
