package server

import (
	"context"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/live"
)

// TestLiveFeeds: an explore and a crash run publish their progress under
// their sessions, with the run's kind and request, and end there when the
// RPC ends.
func TestLiveFeeds(t *testing.T) {
	t.Parallel()
	srv := New(&fakeDomain{}, nil)
	srv.live = live.NewHub()
	c := serveSlow(t, srv)
	ctx := context.Background()
	drain := func(s interface{ RecvMsg(any) error }, m any) {
		for s.RecvMsg(m) == nil {
		}
	}
	es, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{"ext2", "vfat"}, Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	drain(es, new(themisv1.ExploreResponse))
	cs, err := c.Crash(ctx, &themisv1.CrashRequest{Lanes: []string{"ext2"}, Trace: []string{"create f 0644", "fsync f"}})
	if err != nil {
		t.Fatal(err)
	}
	drain(cs, new(themisv1.CrashResponse))
	for _, tt := range []struct {
		session, kind, option, line string
		states                      int64
	}{
		{"s-1", "explore", `"vfat"`, "2 states (2 unique), depth 0, 1 finding(s)", 2}, // the summary, last
		{"s-c", "crash", "fsync f", "1 crash state(s) checked, 0 finding(s); last: lane ext2 state 3", 1},
	} {
		r, last, found, running := srv.live.Lookup(tt.session)
		if !found || running || r.Kind != tt.kind || !strings.Contains(r.Options, tt.option) || !strings.HasPrefix(last.Line, tt.line) || last.States != tt.states || !last.Done {
			t.Errorf("%s: %+v %+v found %v running %v", tt.session, r, last, found, running)
		}
	}
}
