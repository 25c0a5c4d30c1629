package server

import (
	"fmt"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/live"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/runs/exploration"
)

// startFeed begins a run's live feed (the dashboard's progress) with
// req, the run's request, as its options; nil when the daemon keeps none.
func (s *Server) startFeed(kind string, req proto.Message) *live.Feed {
	if s.live == nil {
		return nil
	}
	return s.live.Start(kind, prototext.MarshalOptions{}.Format(req))
}

// exploreUpdate is an explore (or a check part's) progress as a live
// update.
func exploreUpdate(p exploration.Progress) live.Update {
	return live.Update{
		States: int64(p.States), Unique: int64(p.Unique), Depth: int64(p.Depth), Findings: int64(p.Findings),
		Rate: p.StatesPerSec, ElapsedS: p.Elapsed.Seconds(),
		Line: fmt.Sprintf("%d states (%d unique), depth %d, %d finding(s), %.1f states/s", p.States, p.Unique, p.Depth, p.Findings, p.StatesPerSec),
	}
}

// crashTally counts a crash run's checked states and findings for its
// live updates.
type crashTally struct{ states, findings atomic.Int64 }

// update is the tally after result r as a live update.
func (c *crashTally) update(r crashcheck.Result) live.Update {
	n, f := c.states.Add(1), c.findings.Load()
	return live.Update{States: n, Findings: f,
		Line: fmt.Sprintf("%d crash state(s) checked, %d finding(s); last: lane %s state %d %s", n, f, r.Lane, r.Index, r.Verdict)}
}
