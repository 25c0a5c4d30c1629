package exploreproto

import (
	"slices"
	"strings"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest/guestproto"
	"github.com/themisfs/themis/runs/exploration"
)

// Request is the request of a run's options, as the run resolved them.
func Request(o *exploration.Options) *themisv1.ExploreRequest {
	return &themisv1.ExploreRequest{
		Lanes: o.Lanes, MemoryMib: int32(o.MemoryMiB), Backend: o.Backend, Depth: int32(o.Depth), Branching: int32(o.Branching),
		Ops: o.Ops, MaxStates: int64(o.MaxStates), Seed: o.Seed, TimeMode: o.TimeMode, Policy: o.Policy,
		MaxSeconds: int32(o.MaxDuration / time.Second), Fsck: o.Fsck, Remount: o.Remount, LazyRestore: o.LazyRestore,
		Revert: o.Revert, Workers: int32(o.Workers), WarnNotFinding: o.WarnNotFinding, Walks: int32(o.Walks),
		ShardIndex: int32(o.Shard.Index), ShardCount: int32(o.Shard.Count), ShardDepth: int32(o.Shard.Depth),
	}
}

// Progress is a progress report as the API's.
func Progress(p exploration.Progress) *themisv1.ExploreProgress {
	return &themisv1.ExploreProgress{
		States: int64(p.States), UniqueStates: int64(p.Unique), Depth: int32(p.Depth), Findings: int64(p.Findings),
		StatesPerSec: p.StatesPerSec, ElapsedS: secs(p.Elapsed),
		OpS: secs(p.OpTime), FingerprintS: secs(p.FingerprintTime), RestoreS: secs(p.RestoreTime),
	}
}

// Summary is the run's summary as the API's: counts, times, configuration,
// roots, image, a shard's state keys, crash counts and overlay layers.
func Summary(s *exploration.Summary) *themisv1.ExploreSummary {
	if s == nil {
		return nil
	}
	out := &themisv1.ExploreSummary{
		SessionId: s.Session, States: int64(s.States), UniqueStates: int64(s.Unique), Findings: int64(s.Findings),
		StatesPerSec: s.StatesPerSec, Backend: s.Backend, Stopped: s.Stopped, ElapsedS: secs(s.Elapsed),
		MaxDepth: int32(s.MaxDepth), Digest: s.Digest,
		OpS: secs(s.OpTime), FingerprintS: secs(s.FingerprintTime), RestoreS: secs(s.RestoreTime),
		RestoresSkipped: int64(s.RestoresSkipped), UnconfirmedHangs: int64(s.UnconfirmedHangs), Revert: s.Revert,
		Workers: int32(s.Workers), WorkersWhy: s.WorkersWhy, Sessions: s.Sessions,
		ShardIndex: int32(s.Shard.Index), ShardCount: int32(s.Shard.Count), ShardDepth: int32(s.Shard.Depth),
		Image: guestproto.Ref(s.Image), Policy: s.Policy, Judged: s.Judged, OpsLeftOut: s.OpsLeftOut, DeclaredOps: int64(s.DeclaredOps), DeclaredStates: int64(s.DeclaredStates),
	}
	for _, k := range s.StateKeys {
		out.StateKeys = append(out.StateKeys, []byte(k))
	}
	for _, d := range s.StateDepths {
		out.StateDepths = append(out.StateDepths, int32(d))
	}
	for _, n := range s.UniqueByDepth {
		out.UniqueByDepth = append(out.UniqueByDepth, int64(n))
	}
	for _, k := range s.DeclaredKeys {
		out.DeclaredStateKeys = append(out.DeclaredStateKeys, []byte(k))
	}
	if c := s.Crash; c != nil {
		out.Crash = &themisv1.ExploreCrash{Points: int64(c.Points), Repeats: int64(c.Repeats), Unlogged: int64(c.Unlogged), Failed: int64(c.Failed), States: int64(c.States),
			NotClean: int64(c.NotClean), Durable: int64(c.Durable), Lost: int64(c.Lost), Unnamed: int64(c.Unnamed), Findings: int64(c.Findings), CheckS: secs(c.Time), Repaired: int64(c.Repaired)}
	}
	out.Roots = laneRoots(s.Roots)
	out.BelowRoots = laneRoots(s.BelowRoots)
	for lane, c := range s.Layers {
		out.Layers = append(out.Layers, &themisv1.LaneLayers{Lane: lane, Checked: int64(c.Checked), Whiteouts: int64(c.Whiteouts), Opaque: int64(c.Opaque)})
	}
	slices.SortFunc(out.Layers, func(a, b *themisv1.LaneLayers) int { return strings.Compare(a.GetLane(), b.GetLane()) })
	return out
}

// laneRoots lists roots by lane name.
func laneRoots(m map[string][]byte) []*themisv1.LaneRoot {
	var out []*themisv1.LaneRoot
	for lane, root := range m {
		out = append(out, &themisv1.LaneRoot{Lane: lane, Root: root})
	}
	slices.SortFunc(out, func(a, b *themisv1.LaneRoot) int { return strings.Compare(a.GetLane(), b.GetLane()) })
	return out
}

func secs(d time.Duration) float64 { return d.Seconds() }
