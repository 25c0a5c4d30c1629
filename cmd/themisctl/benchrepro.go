package main

import (
	"context"
	"fmt"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/bugs"
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
		return r.Reproduced, fmt.Sprintf("crash state %v: %s %s", r.Keep, r.Verdict, r.Durability)
	case f.GetKernel() != nil:
		r, err := replayKernel(ctx, c, f, image)
		if err != nil {
			return false, "replay failed: " + err.Error()
		}
		return r.Reproduced, r.Verdict
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
