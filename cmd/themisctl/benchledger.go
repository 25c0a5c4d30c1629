package main

import (
	"cmp"
	"context"
	"slices"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/bugs"
)

// maxLedgerPages bounds the pages of one session's findings
// withLedgerLosses reads (1000 a page).
const maxLedgerPages = 4

// withLedgerLosses is events and, after them in time order, the crash
// findings of seen's check (a check run to its end) that lost what an
// fsync made durable and that its stream did not carry: a check streams
// the first finding of each signature a part finds, the ledger holds
// every one, each with the time it was found. A key is coarse, so a later
// finding of a key the stock kernel shares may be the case's own
// (stockClean replays them on the stock image). A page that cannot be
// read is left out, with a note.
func withLedgerLosses(ctx context.Context, c *conn, seen *checkSeen, events []checkEvent) []checkEvent {
	streamed := map[string]bool{}
	for _, e := range events {
		streamed[e.finding] = true
	}
	out := slices.Clone(events)
	for part, sessions := range seen.sessions {
		for _, id := range sessions {
			for _, f := range sessionFindings(ctx, c, id) {
				if streamed[f.GetId()] || f.GetKind() != "crash" || !strings.HasPrefix(f.GetCrash().GetDurability(), "LOST") {
					continue
				}
				streamed[f.GetId()] = true
				out = append(out, checkEvent{at: f.GetCreateTime().AsTime().Sub(seen.start), key: bugs.FindingKey(f.GetKind(), f.GetSignature()),
					part: part, detail: f.GetDetail(), finding: f.GetId()})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b checkEvent) int { return cmp.Compare(a.at, b.at) })
	return out
}

// sessionFindings are the ledger's findings of one session, oldest first.
func sessionFindings(ctx context.Context, c *conn, session string) []*themisv1.Finding {
	var out []*themisv1.Finding
	token := ""
	for range maxLedgerPages {
		resp, err := c.ListFindings(ctx, &themisv1.ListFindingsRequest{SessionId: session, PageSize: 1000, PageToken: token})
		if err != nil {
			progress("findings of session " + session + ": " + err.Error())
			return out
		}
		out = append(out, resp.GetFindings()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	return out
}
