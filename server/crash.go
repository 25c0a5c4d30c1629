package server

import (
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/runs/crashcheck"
)

// Crash implements themisv1.ThemisServer.
func (s *Server) Crash(req *themisv1.CrashRequest, stream themisv1.Themis_CrashServer) error {
	out, ctx := newRunStream[*themisv1.CrashResponse](s, "crash", stream, nil)
	sum, err := s.d.Crash(ctx, crashcheck.Options{
		Lanes: req.GetLanes(), Setup: req.GetSetup(), Trace: req.GetTrace(), MemoryMiB: int(req.GetMemoryMib()),
		Workload: req.GetWorkload(), MaxWorkloads: int(req.GetMaxWorkloads()),
		Crash: crash.Options{MaxSubset: int(req.GetCrashWrites()), MaxStates: int(req.GetMaxStates())},
	}, func(r crashcheck.Result) {
		out.send(&themisv1.CrashResponse{Event: &themisv1.CrashResponse_Result{Result: crashResultProto(r)}})
	})
	return out.end(err, func() *themisv1.CrashResponse {
		cs := &themisv1.CrashSummary{SessionId: sum.Session, ElapsedS: sum.Elapsed.Seconds(), StatesPerSec: sum.StatesPerSec,
			Workloads: int32(sum.Workloads), Truncated: sum.Truncated}
		for _, lane := range sortedKeys(sum.Lanes) {
			l := sum.Lanes[lane]
			cs.Lanes = append(cs.Lanes, &themisv1.CrashLane{Lane: lane, Writes: int32(l.Writes), Flushes: int32(l.Flushes),
				States: int32(l.States), NotClean: int32(l.Dirty), Truncated: l.Truncated, Check: l.Replay,
				Durable: int32(l.Durable), Lost: int32(l.Lost), DurableNote: l.DurableNote})
		}
		return &themisv1.CrashResponse{Event: &themisv1.CrashResponse_Summary{Summary: cs}}
	})
}

func crashResultProto(r crashcheck.Result) *themisv1.CrashResult {
	p := &themisv1.CrashResult{Lane: r.Lane, Index: int32(r.Index), Flushes: int32(r.State.Flushes), Kind: r.State.Kind,
		Verdict: r.Verdict, Output: r.Output, Workload: int32(r.Workload), Trace: r.Trace, Durability: r.Durability}
	for _, i := range r.State.InFlight() {
		p.InFlight = append(p.InFlight, int32(i))
	}
	for _, i := range r.State.Epoch {
		p.Epoch = append(p.Epoch, int32(i))
	}
	return p
}
