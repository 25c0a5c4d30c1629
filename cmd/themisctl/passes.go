package main

import (
	"context"
	"fmt"
	"sort"
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

// passesRow is one clock mode of replay --passes, with or without
// instruction counting.
type passesRow struct {
	Clock  string         `json:"clock"` // "free" or "pinned"
	ICount bool           `json:"icount"`
	Passes int            `json:"passes"`
	Disks  map[string]int `json:"distinct_disk_hashes"` // by lane
	// RAM is the number of distinct RAM hashes (-1: the backend does not
	// expose RAM).
	RAM int `json:"distinct_ram_hashes"`
}

// passesResult is replay --passes: how many distinct whole-disk and RAM
// hashes the passes of one trace from one checkpoint left.
type passesResult struct {
	Finding  string      `json:"finding"`
	Sessions []string    `json:"sessions"` // one per instruction-counting mode
	Backend  string      `json:"backend"`
	Trace    []string    `json:"trace"`
	Rows     []passesRow `json:"rows"`
}

// replayPasses measures replay fidelity on the daemon (the ReplayPasses
// RPC: exploration.Passes): f's trace (a finding's, or one given by hand
// with its lanes: f.Id "trace") o.n times from one checkpoint per clock
// mode, a session per instruction-counting mode.
func replayPasses(ctx context.Context, c *conn, f *themisv1.Finding, o passesOptions) (*passesResult, error) {
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
	out := &passesResult{Finding: f.GetId(), Sessions: res.GetSessionIds(), Backend: res.GetBackend(), Trace: res.GetTrace()}
	for _, row := range res.GetRows() {
		disks := map[string]int{}
		for lane, n := range row.GetDistinctDiskHashes() {
			disks[lane] = int(n)
		}
		out.Rows = append(out.Rows, passesRow{Clock: row.GetClock(), ICount: row.GetIcount(), Passes: int(row.GetPasses()), Disks: disks, RAM: int(row.GetDistinctRamHashes())})
	}
	return out, nil
}

func printPasses(r *passesResult) error {
	w := newTable()
	fmt.Fprintf(w, "finding\t%s (%d ops, then sync)\n", r.Finding, len(r.Trace))
	fmt.Fprintf(w, "backend\t%s\n", r.Backend)
	fmt.Fprintf(w, "icount\tclock\tpasses\tdistinct disk hashes\tdistinct RAM hashes\n")
	for _, row := range r.Rows {
		var lanes []string
		for l := range row.Disks {
			lanes = append(lanes, l)
		}
		sort.Strings(lanes)
		var ds []string
		for _, l := range lanes {
			ds = append(ds, fmt.Sprintf("%s %d", l, row.Disks[l]))
		}
		ram := fmt.Sprint(row.RAM)
		if row.RAM < 0 {
			ram = "n/a (backend)"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", map[bool]string{false: "off", true: "on"}[row.ICount], row.Clock, row.Passes, strings.Join(ds, ", "), ram)
	}
	return w.Flush()
}
