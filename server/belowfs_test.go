package server

import (
	"context"
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
