package runproto

import (
	"cmp"
	"fmt"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/runreport"
)

// MaxPoints bounds the progress points a page keeps (the first ones).
const MaxPoints = 10000

// Run is the page of the run req asked for, which ended with sum after
// the progress reports, with its findings in the order found (each its
// latest version). The findings' footprints are left for the caller
// (Finding.FootprintNote says "not measured" until it sets them).
func Run(req *themisv1.ExploreRequest, sum *themisv1.ExploreSummary, progress []*themisv1.ExploreProgress, findings []*themisv1.Finding) *runreport.Run {
	r := &runreport.Run{
		Title: fmt.Sprintf("explore %s depth %d seed %d", strings.Join(req.GetLanes(), ","), req.GetDepth(), req.GetSeed()),
		Config: [][2]string{{"lanes", strings.Join(req.GetLanes(), ", ")}, {"depth", fmt.Sprint(req.GetDepth())}, {"seed", fmt.Sprint(req.GetSeed())},
			{"ops", cmp.Or(strings.Join(req.GetOps(), ", "), "metis")}, {"policy", sum.GetPolicy()}, {"judged", sum.GetJudged()},
			{"backend", sum.GetBackend()}, {"revert", sum.GetRevert()}, {"workers", fmt.Sprintf("%d (%s)", sum.GetWorkers(), sum.GetWorkersWhy())}},
		Figures: [][2]string{{"states", fmt.Sprint(sum.GetStates())}, {"unique states", fmt.Sprint(sum.GetUniqueStates())},
			{"findings", fmt.Sprint(sum.GetFindings())}, {"states/s", fmt.Sprintf("%.1f", sum.GetStatesPerSec())},
			{"elapsed", fmt.Sprintf("%.1f s", sum.GetElapsedS())}, {"max depth", fmt.Sprint(sum.GetMaxDepth())}, {"digest", sum.GetDigest()},
			{"session", sum.GetSessionId()}},
		UniqueByDepth: sum.GetUniqueByDepth(),
	}
	for _, p := range progress[:min(len(progress), MaxPoints)] {
		r.Progress = append(r.Progress, runreport.Point{Seconds: p.GetElapsedS(), States: p.GetStates(), Unique: p.GetUniqueStates()})
	}
	for _, f := range findings {
		rf := runreport.Finding{ID: f.GetId(), Kind: f.GetKind(), Detail: f.GetDetail(), Path: f.GetPath(), Field: f.GetField(),
			Trace: f.GetTrace(), Minimized: f.GetMinimized(), DuplicateOf: f.GetDuplicateOf(), FootprintNote: "not measured"}
		for _, l := range f.GetLanes() {
			rf.Lanes = append(rf.Lanes, runreport.LaneErrno{Lane: l.GetLane(), Errno: l.GetErrno()})
		}
		r.Findings = append(r.Findings, rf)
	}
	return r
}
