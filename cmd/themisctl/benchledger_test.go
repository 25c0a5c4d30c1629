package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
)

// ledgerClient serves ListFindings from pages by session and page token.
type ledgerClient struct {
	themisv1.ThemisClient
	pages map[string][]*themisv1.ListFindingsResponse
}

func (l *ledgerClient) ListFindings(_ context.Context, req *themisv1.ListFindingsRequest, _ ...grpc.CallOption) (*themisv1.ListFindingsResponse, error) {
	pages := l.pages[req.GetSessionId()]
	i := 0
	if req.GetPageToken() != "" {
		i = int(req.GetPageToken()[0] - '0')
	}
	return pages[i], nil
}

// TestWithLedgerLosses: the crash findings that lost what an fsync made
// durable and that the stream left out join the streamed events in the
// order found, from every page of every session of the check; others
// (not lost, not crash, streamed already) do not.
func TestWithLedgerLosses(t *testing.T) {
	start := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(start.Add(time.Duration(s) * time.Second)) }
	crash := func(id string, s int, durability string) *themisv1.Finding {
		return &themisv1.Finding{Id: id, Kind: "crash", Signature: "crash lost ext2 after fsync of a file", CreateTime: at(s),
			Crash: &themisv1.CrashPoint{Durability: durability}}
	}
	lc := &ledgerClient{pages: map[string][]*themisv1.ListFindingsResponse{
		"s-1": {{Findings: []*themisv1.Finding{crash("f-1", 50, "LOST f-00: missing"), crash("f-2", 30, "LOST f-01: missing"),
			crash("f-3", 40, "OK 3 checked"), {Id: "f-4", Kind: "state-divergence", CreateTime: at(20)}}}},
		"s-2": {{Findings: []*themisv1.Finding{crash("f-6", 70, "OK")}, NextPageToken: "1"},
			{Findings: []*themisv1.Finding{crash("f-5", 10, "LOST d-00: missing")}}},
	}}
	c := &conn{Client: &client.Client{ThemisClient: lc}}
	seen := &checkSeen{start: start, sessions: map[string][]string{"crash ext2": {"s-1", "s-2"}}}
	streamed := []checkEvent{{at: 50 * time.Second, key: "k", part: "crash ext2", finding: "f-1"}}
	got := withLedgerLosses(context.Background(), c, seen, streamed)
	var ids []string
	for _, e := range got {
		ids = append(ids, e.finding)
	}
	if want := []string{"f-5", "f-2", "f-1"}; !slices.Equal(ids, want) {
		t.Fatalf("candidates %v, want %v", ids, want)
	}
	if got[0].at != 10*time.Second || got[0].part != "crash ext2" || got[0].key != "finding|crash|crash lost ext2 after fsync of a file" {
		t.Errorf("first candidate %+v: want found 10 s in, of its part, keyed by its signature", got[0])
	}
}
