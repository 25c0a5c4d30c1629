package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
)

// passesOptions are replay --passes's: how many passes, the clock modes
// ("free", "pinned", "both"), the instruction counting ("off", "on",
// "both") and the image ("" the finding's or the lanes' own).
type passesOptions struct {
	n                    int
	clock, icount, image string
}

// replayPasses measures replay fidelity on the daemon (the ReplayPasses
// RPC: exploration.Passes): f's trace (a finding's, or one given by hand
// with its lanes: f.Id "trace") o.n times from one checkpoint per clock
// mode, a session per instruction-counting mode.
func replayPasses(ctx context.Context, c *conn, f *themisv1.Finding, o passesOptions) (*themisv1.PassesResult, error) {
	req := &themisv1.ReplayPassesRequest{FindingId: f.GetId(), Image: o.image, Passes: int32(o.n), Clock: o.clock, Icount: o.icount}
	if f.GetId() == "trace" {
		req.FindingId, req.Lanes, req.Trace = "", f.GetLaneSpecs(), f.GetTrace()
	}
	stream, err := c.ReplayPasses(ctx, req)
	if err != nil {
		return nil, err
	}
	var res *themisv1.PassesResult
	err = client.Drain(stream.Recv, func(m *themisv1.ReplayPassesResponse) error {
		if p := m.GetProgress(); p != nil {
			progress(fmt.Sprintf("replay %s: icount %v, clock %s, pass %d of %d", f.GetId(), p.GetIcount(), p.GetClock(), p.GetPass(), p.GetPasses()))
		}
		if r := m.GetResult(); r != nil {
			res = r
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("replay --passes: the stream ended without a result")
	}
	if res.GetFindingId() == "" {
		res.FindingId = f.GetId()
	}
	return res, nil
}

func printPasses(r *themisv1.PassesResult) error {
	w := newTable()
	fmt.Fprintf(w, "finding\t%s (%d ops, then sync)\n", r.GetFindingId(), len(r.GetTrace()))
	fmt.Fprintf(w, "backend\t%s\n", r.GetBackend())
	fmt.Fprintf(w, "icount\tclock\tpasses\tdistinct disk hashes\tdistinct RAM hashes\n")
	for _, row := range r.GetRows() {
		var ds []string
		for _, l := range slices.Sorted(maps.Keys(row.GetDistinctDiskHashes())) {
			ds = append(ds, fmt.Sprintf("%s %d", l, row.GetDistinctDiskHashes()[l]))
		}
		ram := fmt.Sprint(row.GetDistinctRamHashes())
		if row.GetDistinctRamHashes() < 0 {
			ram = "n/a (backend)"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", map[bool]string{false: "off", true: "on"}[row.GetIcount()], row.GetClock(), row.GetPasses(), strings.Join(ds, ", "), ram)
	}
	return w.Flush()
}
