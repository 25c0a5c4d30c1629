package server

import (
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/runs/check"
	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/runs/exploration/exploreproto"
	"github.com/themisfs/themis/session"
)

// Check implements themisv1.ThemisServer: it runs the check in the domain
// and streams each part's start, its progress, findings and cells against
// the clock rules, its end, then the summary. A cancelled stream cancels
// the check; what its parts found stays stored.
func (s *Server) Check(req *themisv1.CheckRequest, stream themisv1.Themis_CheckServer) error {
	if req.GetBudgetSeconds() < 0 {
		return toStatus(errkind.Invalid("budget_seconds", "must not be negative, got %d", req.GetBudgetSeconds()))
	}
	opts := check.Options{
		Lanes: req.GetLanes(), Reference: req.GetReference(), Image: req.GetImage(), Backend: req.GetBackend(),
		MemoryMiB: int(req.GetMemoryMib()), Budget: time.Duration(req.GetBudgetSeconds()) * time.Second,
		Depth: int(req.GetDepth()), Seed: req.GetSeed(), Workers: int(req.GetWorkers()), Kinds: req.GetParts(),
		Parallel: int(req.GetParallel()),
	}
	if err := check.Validate(opts); err != nil {
		return toStatus(err)
	}
	out, ctx := newRunStream(s, "check", stream, func(m *themisv1.CheckResponse) bool { return m.GetProgress() != nil })
	feed := s.startFeed("check", req)
	defer feed.End()
	found := findingsInOrder{}
	send := func(p *check.Part, m *themisv1.CheckResponse) {
		m.Part = p.Name()
		out.send(m)
	}
	sum, err := s.d.Check(ctx, opts, check.Sinks{
		Started: func(p *check.Part) {
			send(p, &themisv1.CheckResponse{Event: &themisv1.CheckResponse_PartStarted{PartStarted: checkPartProto(p)}})
		},
		Progress: func(p *check.Part, pr exploration.Progress) {
			u := exploreUpdate(pr)
			u.Part = p.Name()
			feed.Publish(pr.Session, u)
			send(p, &themisv1.CheckResponse{Event: &themisv1.CheckResponse_Progress{Progress: exploreproto.Progress(pr)}})
		},
		Found: func(p *check.Part, f session.Finding) {
			fp := findingProto(&f)
			found.add(fp)
			send(p, &themisv1.CheckResponse{Event: &themisv1.CheckResponse_Finding{Finding: fp}})
		},
		Cell: func(p *check.Part, c clocksweep.Cell) {
			send(p, &themisv1.CheckResponse{Event: &themisv1.CheckResponse_Cell{Cell: sweepCellProto(c)}})
		},
		Done: func(p *check.Part) {
			send(p, &themisv1.CheckResponse{Event: &themisv1.CheckResponse_PartDone{PartDone: checkPartProto(p)}})
		},
	})
	return out.end(err, func() *themisv1.CheckResponse {
		ps := checkSummaryProto(sum)
		ps.Found = found.list
		return &themisv1.CheckResponse{Event: &themisv1.CheckResponse_Summary{Summary: ps}}
	})
}

func checkPartProto(p *check.Part) *themisv1.CheckPart {
	out := &themisv1.CheckPart{
		Kind: p.Kind, Name: p.Name(), Lanes: p.Lanes, What: p.What, Skipped: p.Skipped,
		BudgetS: p.Budget.Seconds(), ElapsedS: p.Elapsed.Seconds(), Findings: int64(p.Findings), Stopped: p.Stopped, Error: p.Err, Depth: int32(p.Depth), Walks: int32(p.Walks), SetupFailed: p.SetupFailed, UnconfirmedHangs: int64(p.UnconfirmedHangs),
		Sessions: p.Sessions,
	}
	if p.Explore != nil {
		out.Explore = exploreproto.Summary(p.Explore)
	}
	if p.Sweep != nil {
		out.Sweep = sweepSummaryProto(p.Sweep)
	}
	for _, c := range p.Cells {
		out.Cells = append(out.Cells, sweepCellProto(c))
	}
	return out
}

func checkSummaryProto(s *check.Summary) *themisv1.CheckSummary {
	out := &themisv1.CheckSummary{
		Lanes: s.Lanes, Reference: s.Reference, ReferenceWhy: s.ReferenceWhy, Findings: int64(s.Findings), Failed: int32(s.Failed),
		BudgetS: s.Budget.Seconds(), ElapsedS: s.Elapsed.Seconds(), Stopped: s.Stopped,
		Parallel: int32(s.Parallel), ParallelWhy: s.ParallelWhy,
	}
	for i := range s.Parts {
		out.Parts = append(out.Parts, checkPartProto(&s.Parts[i]))
	}
	return out
}

// findingsInOrder keeps the last version of each finding, in the order
// first seen.
type findingsInOrder struct {
	list []*themisv1.Finding
	at   map[string]int
}

func (l *findingsInOrder) add(f *themisv1.Finding) {
	if i, ok := l.at[f.GetId()]; ok {
		l.list[i] = f
		return
	}
	if l.at == nil {
		l.at = make(map[string]int)
	}
	l.at[f.GetId()] = len(l.list)
	l.list = append(l.list, f)
}
