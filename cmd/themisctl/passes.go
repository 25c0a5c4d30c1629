package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/opspec"
)

// maxPasses bounds replay --passes.
const maxPasses = 100

// pinnedClock is the guest time a pinned pass sets before op i: this plus
// i seconds (2023-11-14 22:13:20 UTC onwards).
const pinnedClock = 1_700_000_000

// passesRow is one clock mode of replay --passes.
type passesRow struct {
	Clock  string         `json:"clock"` // "free" or "pinned"
	Passes int            `json:"passes"`
	Disks  map[string]int `json:"distinct_disk_hashes"` // by lane
	// RAM is the number of distinct RAM hashes (-1: the backend does not
	// expose RAM).
	RAM int `json:"distinct_ram_hashes"`
}

// passesResult is replay --passes: how many distinct whole-disk and RAM
// hashes the passes of one trace from one checkpoint left.
type passesResult struct {
	Finding string      `json:"finding"`
	Session string      `json:"session"`
	Backend string      `json:"backend"`
	Trace   []string    `json:"trace"`
	Rows    []passesRow `json:"rows"`
}

// replayPasses runs f's trace n times from one checkpoint of a fresh
// session per clock mode ("free", "pinned" or "both"), a sync after it,
// and counts the distinct disk and RAM hashes (the paper's §8, Table 13).
func replayPasses(ctx context.Context, c *conn, f *themisv1.Finding, n int, clockMode, image string) (*passesResult, error) {
	if n < 2 || n > maxPasses {
		return nil, fmt.Errorf("--passes %d: want 2 to %d", n, maxPasses)
	}
	modes := map[string][]string{"free": {"free"}, "pinned": {"pinned"}, "both": {"free", "pinned"}}[clockMode]
	if modes == nil {
		return nil, fmt.Errorf("--clock %q: want free, pinned or both", clockMode)
	}
	cs, remove, err := replaySession(ctx, c, f, image)
	if err != nil {
		return nil, err
	}
	defer remove()
	id := cs.GetId()
	root, err := c.Fork(ctx, &themisv1.ForkRequest{SessionId: id, Name: "passes-root"})
	if err != nil {
		return nil, err
	}
	res := &passesResult{Finding: f.GetId(), Session: id, Backend: cs.GetBackend(), Trace: f.GetTrace()}
	for _, mode := range modes {
		row := passesRow{Clock: mode, Passes: n, Disks: map[string]int{}}
		disks, rams := map[string]map[string]bool{}, map[string]bool{}
		for p := range n {
			progress(fmt.Sprintf("replay %s: clock %s, pass %d of %d", f.GetId(), mode, p+1, n))
			if _, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: id, Checkpoint: root.GetCheckpoint().GetId()}); err != nil {
				return nil, err
			}
			fp, err := onePass(ctx, c, id, f, mode == "pinned")
			if err != nil {
				return nil, fmt.Errorf("clock %s, pass %d: %w", mode, p+1, err)
			}
			for _, d := range fp.GetDiskHashes() {
				if disks[d.GetLane()] == nil {
					disks[d.GetLane()] = map[string]bool{}
				}
				disks[d.GetLane()][hex.EncodeToString(d.GetRoot())] = true
			}
			if len(fp.GetRamHash()) > 0 {
				rams[hex.EncodeToString(fp.GetRamHash())] = true
			}
		}
		for lane, set := range disks {
			row.Disks[lane] = len(set)
		}
		row.RAM = len(rams)
		if row.RAM == 0 {
			row.RAM = -1
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// onePass applies the trace (each op after the guest clock is set to
// pinnedClock+i when pinned; lanes remounted between ops under the remount
// revert), then sync, and returns the hashes.
func onePass(ctx context.Context, c *conn, id string, f *themisv1.Finding, pinned bool) (*themisv1.FingerprintResponse, error) {
	trace := append(append([]string(nil), f.GetTrace()...), "sync")
	for i, s := range trace {
		if i > 0 && i < len(trace)-1 && f.GetRevert() == "remount" {
			if err := remountLanes(ctx, c, id); err != nil {
				return nil, err
			}
		}
		if pinned {
			if err := applyOp(ctx, c, id, fmt.Sprintf("set-clock %d", pinnedClock+i)); err != nil {
				return nil, err
			}
		}
		if err := applyOp(ctx, c, id, s); err != nil {
			return nil, err
		}
	}
	return c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: id, Hashes: true})
}

// applyOp applies one op in short form; its errnos are the trace's own
// business (a finding's trace may fail on a lane), not an error.
func applyOp(ctx context.Context, c *conn, id, s string) error {
	op, err := opspec.Parse(s)
	if err != nil {
		return fmt.Errorf("op %q: %w", s, err)
	}
	_, err = c.Apply(ctx, &themisv1.ApplyRequest{SessionId: id, Op: op})
	return err
}

func printPasses(r *passesResult) error {
	w := newTable()
	fmt.Fprintf(w, "finding\t%s (%d ops, then sync)\n", r.Finding, len(r.Trace))
	fmt.Fprintf(w, "backend\t%s\n", r.Backend)
	fmt.Fprintf(w, "clock\tpasses\tdistinct disk hashes\tdistinct RAM hashes\n")
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
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", row.Clock, row.Passes, strings.Join(ds, ", "), ram)
	}
	return w.Flush()
}
