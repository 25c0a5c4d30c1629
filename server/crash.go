package server

import (
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/session"
)

// Crash implements themisv1.ThemisServer.
func (s *Server) Crash(req *themisv1.CrashRequest, stream themisv1.Themis_CrashServer) error {
	out, ctx := newRunStream[*themisv1.CrashResponse](s, "crash", stream, nil)
	feed, tally := s.startFeed("crash", req), &crashTally{}
	defer feed.End()
	sum, err := s.d.Crash(ctx, crashOptions(req), crashcheck.Sinks{
		Result: func(r crashcheck.Result) {
			feed.Publish(r.Session, tally.update(r))
			out.send(&themisv1.CrashResponse{Event: &themisv1.CrashResponse_Result{Result: crashResultProto(r)}})
		},
		Finding: func(f session.Finding) {
			tally.findings.Add(1)
			out.send(&themisv1.CrashResponse{Event: &themisv1.CrashResponse_Finding{Finding: findingProto(&f)}})
		},
		Image: func(lane string, off int64, data []byte, size int64) error {
			out.send(&themisv1.CrashResponse{Event: &themisv1.CrashResponse_Image{Image: &themisv1.CrashImageChunk{Lane: lane, Offset: off, Data: data, Size: size}}})
			return ctx.Err()
		},
	})
	return out.end(err, func() *themisv1.CrashResponse { return crashSummaryProto(sum) })
}

// crashOptions is req as crashcheck's options.
func crashOptions(req *themisv1.CrashRequest) crashcheck.Options {
	o := crashcheck.Options{
		Lanes: req.GetLanes(), Setup: req.GetSetup(), Trace: req.GetTrace(), MemoryMiB: int(req.GetMemoryMib()),
		Workload: req.GetWorkload(), MaxWorkloads: int(req.GetMaxWorkloads()),
		Crash:       crash.Options{MaxSubset: int(req.GetCrashWrites()), MaxStates: int(req.GetMaxStates())},
		NoSetupSync: req.GetNoSetupSync(), StreamImage: req.GetStreamImage(), Image: req.GetImage(), Minimize: int(req.GetMinimize()), HostReplay: req.GetHostReplay(),
		Atomic: req.GetAtomic(),
	}
	if req.GetOnly() != nil {
		o.Only = ints(req.GetOnly().GetKeep())
	}
	return o
}

func crashSummaryProto(sum *crashcheck.Summary) *themisv1.CrashResponse {
	cs := &themisv1.CrashSummary{SessionId: sum.Session, ElapsedS: sum.Elapsed.Seconds(), StatesPerSec: sum.StatesPerSec,
		Workloads: int32(sum.Workloads), Truncated: sum.Truncated, Findings: int32(sum.Findings),
		Sessions: sum.Sessions, Deaths: int32(sum.Deaths), Partial: sum.Partial}
	for _, lane := range sortedKeys(sum.Lanes) {
		l := sum.Lanes[lane]
		cs.Lanes = append(cs.Lanes, &themisv1.CrashLane{Lane: lane, Writes: int32(l.Writes), Flushes: int32(l.Flushes),
			States: int32(l.States), NotClean: int32(l.Dirty), Truncated: l.Truncated, Check: l.Replay,
			Durable: int32(l.Durable), Lost: int32(l.Lost), Unnamed: int32(l.Unnamed), DurableNote: l.DurableNote, Atomic: int32(l.Atomic), AtBoundary: int32(l.AtBoundary),
			Deaths: int32(l.Deaths), Skipped: int32(l.Skipped), SkipNote: l.SkipNote})
	}
	return &themisv1.CrashResponse{Event: &themisv1.CrashResponse_Summary{Summary: cs}}
}

func crashResultProto(r crashcheck.Result) *themisv1.CrashResult {
	p := &themisv1.CrashResult{Lane: r.Lane, Index: int32(r.Index), Flushes: int32(r.State.Flushes), Kind: r.State.Kind,
		Verdict: r.Verdict, Output: r.Output, Workload: int32(r.Workload), Trace: r.Trace, Durability: r.Durability,
		Atomicity: r.Atomicity, Kernel: kernelReportProto(r.Kernel), SessionId: r.Session}
	p.InFlight, p.Epoch = int32s(r.State.InFlight()), int32s(r.State.Epoch)
	return p
}

// crashPointProto is a crash finding's state (nil for other findings).
func crashPointProto(c *session.CrashPoint) *themisv1.CrashPoint {
	if c == nil {
		return nil
	}
	return &themisv1.CrashPoint{Lane: c.Lane, Setup: c.Setup, SetupSync: c.SetupSync, Keep: int32s(c.Keep), Flushes: int32(c.Flushes),
		Kind: c.Kind, Epoch: int32s(c.Epoch), Writes: int32(c.Writes), LogFlushes: int32(c.LogFlushes), Verdict: c.Verdict,
		Durability: c.Durability, Output: c.Output, States: int32(c.States), NotClean: int32(c.NotClean)}
}

func int32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func ints(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
