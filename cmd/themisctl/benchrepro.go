package main

import (
	"context"
	"fmt"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/bugs"
	"github.com/themisfs/themis/client"
)

// reproClockBudget bounds the clock part run again to reproduce a cell.
const reproClockBudget = 3 * 60 // seconds

// reproduceDetection replays a case's detection in a fresh session on
// its patched image (image): a finding's trace as themisctl replay runs
// it (kernel, crash, divergence and the remount and unreadable
// self-references), a clock cell by running the check's clock part
// again until the cell's key comes. It says whether the detection showed
// again and what the replay showed, or why it could not be replayed.
func reproduceDetection(ctx context.Context, c *conn, bc bugs.Case, image string, e checkEvent) (bool, string) {
	if e.finding == "" {
		return reproduceCell(ctx, c, bc, image, e.key)
	}
	fr, err := c.GetFinding(ctx, &themisv1.GetFindingRequest{FindingId: e.finding})
	if err != nil {
		return false, fmt.Sprintf("replay failed: get finding %s: %v", e.finding, err)
	}
	f := fr.GetFinding()
	switch {
	case f.GetCrash() != nil:
		r, err := replayCrash(ctx, c, f, nil)
		if err != nil {
			return false, "replay failed: " + err.Error()
		}
		return r.GetReproduced(), fmt.Sprintf("crash state %v: %s %s", r.GetKeep(), r.GetResult().GetVerdict(), r.GetResult().GetDurability())
	case f.GetKernel() != nil:
		r, err := replayKernel(ctx, c, f, image)
		if err != nil {
			return false, "replay failed: " + err.Error()
		}
		return r.GetReproduced(), r.GetVerdict()
	}
	r, err := replay(ctx, c, f, image)
	switch {
	case err != nil:
		return false, "replay failed: " + err.Error()
	case r.NotReplayable != "":
		return false, "not replayable: " + r.NotReplayable
	case r.Reference != "":
		return r.Reproduced, r.Reference
	}
	return r.Reproduced, fmt.Sprintf("%d ops replayed: errno diverged %v, state diverged %v", len(r.Steps), r.ErrnoDiverged, r.StateDiverged)
}

// reproduceCell runs the check's clock part on the case's image again
// and says whether the cell key came again.
func reproduceCell(ctx context.Context, c *conn, bc bugs.Case, image, key string) (bool, string) {
	req := &themisv1.CheckRequest{Lanes: []string{bc.FS}, Image: image, BudgetSeconds: reproClockBudget, Parts: []string{"clock"}}
	seen, err := observeCheck(ctx, c, req, func(k string) bool { return k == key })
	if err != nil {
		return false, "clock part again failed: " + err.Error()
	}
	for _, e := range seen.events {
		if e.key == key {
			return true, fmt.Sprintf("the clock part again: the cell came after %s", e.at.Round(1e9))
		}
	}
	return false, fmt.Sprintf("the clock part again: %d cells, not this one", len(seen.events))
}

// maxStockReplays bounds the findings of a case's check, in the stock
// baseline by key, that stockClean replays on the stock image (each a
// crash run of its setup and trace, 15-30 s on TCG).
const maxStockReplays = 8

// stockClean looks, in time order, for a finding among events (a case's
// check's, each in the stock baseline by its key) that the stock image
// does not show when its own trace runs there: a crash finding that lost
// what an fsync made durable, whose setup and trace keep it in every
// crash state on stock. A key is coarse — "lost after fsync of a file" is
// one key for every way of losing one — and a stock bug of the same key
// would hide the case's otherwise. It returns the finding and what the
// stock image showed, or false.
func stockClean(ctx context.Context, c *conn, stock string, events []checkEvent) (checkEvent, string, bool) {
	tried := 0
	for _, e := range events {
		if e.finding == "" || tried == maxStockReplays {
			continue
		}
		fr, err := c.GetFinding(ctx, &themisv1.GetFindingRequest{FindingId: e.finding})
		f := fr.GetFinding()
		if err != nil || f.GetCrash() == nil || !strings.HasPrefix(f.GetCrash().GetDurability(), "LOST") {
			continue
		}
		tried++
		states, lost, err := crashOnStock(ctx, c, f, stock)
		if err != nil {
			progress(fmt.Sprintf("finding %s on the stock image: %v", e.finding, err))
			continue
		}
		if states > 0 && lost == 0 {
			return e, fmt.Sprintf("its setup and trace on the stock image: %d crash states, none lost what the fsync made durable", states), true
		}
	}
	return checkEvent{}, "", false
}

// crashOnStock runs crash finding f's setup and trace on the stock image
// in a fresh session, every crash state, and counts them and those that
// lost what the trace's fsync made durable.
func crashOnStock(ctx context.Context, c *conn, f *themisv1.Finding, stock string) (states, lost int32, err error) {
	req := crashOf(f, false)
	req.Only, req.Image = nil, stock
	progress(fmt.Sprintf("crash finding %s on the stock image: every crash state of its setup and trace", f.GetId()))
	stream, err := c.Crash(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	var sum *themisv1.CrashSummary
	err = client.Drain(stream.Recv, func(r *themisv1.CrashResponse) error {
		if s := r.GetSummary(); s != nil {
			sum = s
		}
		return nil
	})
	if err == nil && sum == nil {
		err = fmt.Errorf("the daemon ended the stream without a summary")
	}
	if err != nil {
		return 0, 0, err
	}
	for _, l := range sum.GetLanes() {
		states, lost = states+l.GetStates(), lost+l.GetLost()
	}
	return states, lost, nil
}
