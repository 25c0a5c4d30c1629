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

// passesOptions are replay --passes's: how many passes, the clock modes
// ("free", "pinned", "both"), the instruction counting ("off", "on",
// "both") and the image ("" the lanes' own).
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

// replayPasses runs f's trace o.n times from one checkpoint, a sync after
// it, per clock mode, in a fresh session per instruction-counting mode,
// and counts the distinct disk and RAM hashes (the paper's §8, Table 13).
func replayPasses(ctx context.Context, c *conn, f *themisv1.Finding, o passesOptions) (*passesResult, error) {
	if o.n < 2 || o.n > maxPasses {
		return nil, fmt.Errorf("--passes %d: want 2 to %d", o.n, maxPasses)
	}
	modes := map[string][]string{"free": {"free"}, "pinned": {"pinned"}, "both": {"free", "pinned"}}[o.clock]
	if modes == nil {
		return nil, fmt.Errorf("--clock %q: want free, pinned or both", o.clock)
	}
	icounts := map[string][]bool{"off": {false}, "on": {true}, "both": {false, true}}[o.icount]
	if icounts == nil {
		return nil, fmt.Errorf("--icount %q: want off, on or both", o.icount)
	}
	res := &passesResult{Finding: f.GetId(), Trace: f.GetTrace()}
	for _, icount := range icounts {
		if err := passesSession(ctx, c, f, o, modes, icount, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// passesSession adds to res the rows of one session, with or without
// instruction counting: the passes of every clock mode.
func passesSession(ctx context.Context, c *conn, f *themisv1.Finding, o passesOptions, modes []string, icount bool, res *passesResult) error {
	cs, remove, err := replaySession(ctx, c, f, o.image, icount)
	if err != nil {
		return err
	}
	defer remove()
	id := cs.GetId()
	root, err := c.Fork(ctx, &themisv1.ForkRequest{SessionId: id, Name: "passes-root"})
	if err != nil {
		return err
	}
	res.Sessions, res.Backend = append(res.Sessions, id), cs.GetBackend()
	n := o.n
	for _, mode := range modes {
		row := passesRow{Clock: mode, ICount: icount, Passes: n, Disks: map[string]int{}}
		disks, rams := map[string]map[string]bool{}, map[string]bool{}
		for p := range n {
			progress(fmt.Sprintf("replay %s: icount %v, clock %s, pass %d of %d", f.GetId(), icount, mode, p+1, n))
			if _, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: id, Checkpoint: root.GetCheckpoint().GetId()}); err != nil {
				return err
			}
			fp, err := onePass(ctx, c, id, f, mode == "pinned")
			if err != nil {
				return fmt.Errorf("icount %v, clock %s, pass %d: %w", icount, mode, p+1, err)
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
	return nil
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
