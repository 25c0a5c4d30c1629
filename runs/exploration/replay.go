package exploration

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/runs/relay"
	"github.com/themisfs/themis/session"
)

// Replayed is what a replay of a finding showed (Replay).
type Replayed struct {
	Finding, Session, Kind, Revert string
	// Image is the image asked ("": the finding's patched one or the
	// stock one); Booted the one the session booted.
	Image  string
	Booted *guest.Ref
	Steps  []ReplayStep
	// Roots is each lane's fingerprint root after the trace, hex.
	Roots                        map[string]string
	ErrnoDiverged, StateDiverged bool
	// Reference is what the finding's self-reference showed after the
	// trace ("": nothing, or a kind without one).
	Reference string
	// NotReplayable says why the replay cannot show the finding; "" it can.
	NotReplayable string
	Reproduced    bool
	// Kernel is a kernel finding's replay (nil for other kinds).
	Kernel *KernelReplayed
}

// KernelReplayed is what a kernel finding's replay showed.
type KernelReplayed struct {
	// CrashedAt is the op (from 1) the guest died in, or in the lanes'
	// remount before it; 0: it lived to the trace's end. CrashedOp is that
	// op.
	CrashedAt int
	CrashedOp string
	// Report is the report the dead guest left (nil: it lived, or died
	// without one); Signature its signature, Want the finding's
	// (kreport.Report.Signature).
	Report          *kreport.Report
	Signature, Want string
	// Verdict says the outcome in words.
	Verdict string
}

// ReplayStep is one op of a replayed trace and the lanes' errnos.
type ReplayStep struct {
	Op      string
	Results []session.LaneResult
	// Diverged: the errnos differ beyond what the lanes declare.
	Diverged bool
}

// FindingImage is the image a finding replays on when none is asked: the
// one it was found on where that was patched or built from module sources
// (its key), else "" (the lanes' stock image).
func FindingImage(f *session.Finding) string {
	if img := f.Image; img != nil && (len(img.Patches) > 0 || len(img.Sources) > 0 || img.Flavor == guest.FlavorCustom) {
		return img.Key
	}
	return ""
}

// ReplayOn is the image a replay boots: Image (a name or key of the image
// cache, or an image directory), else the lanes' stock image when Stock,
// else FindingImage.
type ReplayOn struct {
	Image string
	Stock bool
}

// Replay runs f's trace again in a fresh session of its lanes, on the
// image on says, and compares as the run that found it did: each
// op's errnos under the lanes' declared differences, the final states
// folded under f's policy, and f's self-reference. The session ends with
// the replay. Crash and kernel findings are refused (ErrInvalid on
// finding_id): it replays through crashcheck (Options.Only). A kernel
// finding's ops run until the guest dies; the report it leaves must have
// the finding's signature.
func Replay(ctx context.Context, m *session.Manager, f *session.Finding, on ReplayOn) (*Replayed, error) {
	if on.Stock && on.Image != "" {
		return nil, errkind.Invalid("stock", "not with an image (%q): the stock image is the lanes' own", on.Image)
	}
	if f.Kind == session.KindCrash {
		return nil, errkind.Invalid("finding_id", "%s is a crash finding: it replays with Crash (its keep as only), not Replay", f.ID)
	}
	trace, err := opspec.ParseTrace(f.Trace)
	if err != nil {
		return nil, fmt.Errorf("finding %s: trace: %w", f.ID, err)
	}
	j, err := replayJudgement(f)
	if err != nil {
		return nil, err
	}
	boot := on.Image
	if boot == "" && !on.Stock {
		boot = FindingImage(f)
	}
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: f.LaneSpecs, Image: boot}, "replay")
	if err != nil {
		return nil, err
	}
	defer run.Close()
	rep := &Replayed{Finding: f.ID, Session: run.ID(), Kind: f.Kind, Revert: f.Revert, Image: on.Image, Booted: run.Image()}
	if f.Kind == session.KindKernel {
		err = replayKernel(run.Context(), run, f, trace, rep)
	} else {
		err = replayOn(run.Context(), run, f, trace, j, rep)
	}
	if err := run.Finish(run.Context(), err); err != nil {
		return nil, err
	}
	return rep, nil
}

// remountsBefore says whether a trace run under revert remounts the lanes
// before its op i, as the search did: under the remount revert, before
// every op but the first and those that share the mount of the op before
// (explore.SharesMount).
func remountsBefore(revert string, trace []*agentv1.Request, i int) bool {
	return revert == RevertRemount && i > 0 && !explore.SharesMount(trace[i])
}

// betweenOps does on run what the search did to the lanes between op i-1
// and op i of trace under revert: a walk (explore.WalkedBefore: the
// fingerprint of op i-1's state), then a remount where the search made
// one (remountsBefore).
func betweenOps(ctx context.Context, run *session.Run, revert string, trace []*agentv1.Request, i int) error {
	if explore.WalkedBefore(i) {
		if _, err := replayLeaves(ctx, run, agentv1.TimeMode_TIME_MODE_NONE); err != nil {
			return err
		}
	}
	if remountsBefore(revert, trace, i) {
		return remountAll(ctx, run)
	}
	return nil
}

// replayOn replays trace on run and fills rep.
func replayOn(ctx context.Context, run *session.Run, f *session.Finding, trace []*agentv1.Request, j family.Judgement, rep *Replayed) error {
	for i, op := range trace {
		if err := betweenOps(ctx, run, f.Revert, trace, i); err != nil {
			return fmt.Errorf("finding %s: before op %d: %w", f.ID, i+1, err)
		}
		results, err := run.Apply(ctx, op)
		if err != nil {
			return err
		}
		step := ReplayStep{Op: f.Trace[i], Results: results, Diverged: explore.ErrnoFinding(j.Declared, op, exploreResults(results))}
		rep.Steps = append(rep.Steps, step)
		rep.ErrnoDiverged = rep.ErrnoDiverged || step.Diverged
	}
	leaves, err := replayLeaves(ctx, run, agentv1.TimeMode_TIME_MODE_NONE)
	if err != nil {
		return err
	}
	rep.Roots = map[string]string{}
	var first [32]byte
	for i, lane := range run.Lanes() {
		rep.Roots[lane] = hex.EncodeToString(oracle.Root(leaves[lane], agentv1.TimeMode_TIME_MODE_NONE))
		canon := oracle.FoldPolicy(leaves[lane], agentv1.TimeMode_TIME_MODE_NONE, j.Policy)
		if i == 0 {
			first = canon
		} else if canon != first {
			rep.StateDiverged = true
		}
	}
	shows, replayable, err := replayReference(ctx, run, f, j, leaves)
	if err != nil {
		return err
	}
	rep.Reference = shows
	rep.Reproduced = rep.ErrnoDiverged || rep.StateDiverged || shows != ""
	if !replayable && len(f.LaneSpecs) < 2 {
		rep.NotReplayable = fmt.Sprintf("a %s finding of one lane: replay compares lanes and replays the remount, unreadable, seek-answer and size-limit self-references only", f.Kind)
	}
	return nil
}

// replayKernel runs kernel finding f's trace on run until the guest dies
// and judges its end: reproduced when it left a report of f's signature
// (the first line is not compared as it is: it holds addresses, CPU and
// PID numbers).
func replayKernel(ctx context.Context, run *session.Run, f *session.Finding, trace []*agentv1.Request, rep *Replayed) error {
	k := &KernelReplayed{}
	if f.Kernel != nil {
		k.Want = f.Kernel.Signature()
	}
	rep.Kernel = k
	for i, op := range trace {
		err := betweenOps(ctx, run, f.Revert, trace, i)
		var results []session.LaneResult
		if err == nil {
			results, err = run.Apply(ctx, op)
		}
		if err != nil {
			d, ok := relay.Of(ctx, err)
			if !ok {
				return fmt.Errorf("finding %s: op %d: %w", f.ID, i+1, err)
			}
			k.CrashedAt, k.CrashedOp, k.Report = i+1, f.Trace[i], d.Report
			break
		}
		rep.Steps = append(rep.Steps, ReplayStep{Op: f.Trace[i], Results: results})
	}
	rep.Reproduced = k.judge(len(trace))
	return nil
}

// judge sets k's verdict after a replay of ops ops and says whether it
// reproduced the finding: the guest died with a report of its signature.
func (k *KernelReplayed) judge(ops int) bool {
	switch {
	case k.CrashedAt == 0:
		k.Verdict = fmt.Sprintf("not reproduced: the %d ops ran and the guest lives", ops)
		return false
	case k.Report == nil:
		k.Verdict = fmt.Sprintf("not reproduced: the guest died at op %d without a kernel report", k.CrashedAt)
		return false
	}
	k.Signature = k.Report.Signature()
	if k.Signature != k.Want {
		k.Verdict = fmt.Sprintf("not reproduced: the kernel crashed at op %d with another report (%s, want %s): %s", k.CrashedAt, k.Signature, k.Want, k.Report.Title)
		return false
	}
	k.Verdict = fmt.Sprintf("reproduced: the kernel crashed again at op %d: %s", k.CrashedAt, k.Report.Title)
	return true
}

// replayJudgement is how f's lanes are compared: under the policy f was
// judged under (auto for findings that did not record it).
func replayJudgement(f *session.Finding) (family.Judgement, error) {
	lanes := make([]family.Lane, len(f.LaneSpecs))
	for i, s := range f.LaneSpecs {
		sp, err := guest.ParseLaneSpec(s)
		if err != nil {
			return family.Judgement{}, fmt.Errorf("finding %s: lane %q: %w", f.ID, s, err)
		}
		lanes[i] = family.Lane{Name: sp.Name, FS: sp.FS, Seeded: sp.Seed() != 0}
	}
	policy := f.Policy
	if policy == "" {
		policy = family.AutoPolicy
	}
	j, err := family.Judge(lanes, policy)
	if err != nil {
		return family.Judgement{}, fmt.Errorf("finding %s: policy: %w", f.ID, err)
	}
	return j, nil
}

// replayReference runs, after the replayed trace, the self-reference of
// f's kind and says what it shows ("": nothing; replayable false: a kind
// without one). leaves are the lanes' leaves after the trace.
func replayReference(ctx context.Context, run *session.Run, f *session.Finding, j family.Judgement, leaves map[string][]*agentv1.Entry) (shows string, replayable bool, err error) {
	var found *explore.Finding
	switch f.Kind {
	case KindRemount:
		found, err = replayRemount(ctx, run, f, j)
	case KindUnreadable, KindSeekAnswer:
		for _, lane := range run.Lanes() {
			if found = unreadableIn(lane, leaves[lane]); found != nil {
				break
			}
		}
	case KindSizeLimit:
		for _, sp := range run.Specs() {
			if fam, ferr := family.Of(sp.FS); ferr == nil && fam.MaxFile > 0 {
				if found = oversizedIn(sp.Name, leaves[sp.Name], fam.MaxFile); found != nil {
					break
				}
			}
		}
	default:
		return "", false, nil
	}
	if err != nil || found == nil {
		return "", true, err
	}
	return found.Detail, true, nil
}

// replayRemount remounts the lanes and says the first lane whose state
// changed (under the time mode f's field needs, canonicalized under f's
// policy); a remount that fails is what it shows.
func replayRemount(ctx context.Context, run *session.Run, f *session.Finding, j family.Judgement) (*explore.Finding, error) {
	mode := agentv1.TimeMode_TIME_MODE_NONE
	if slices.Contains([]string{"atime", "mtime", "ctime"}, f.Field) {
		mode = agentv1.TimeMode_TIME_MODE_ALL
	}
	before, err := replayLeaves(ctx, run, mode)
	if err != nil {
		return nil, err
	}
	if err := remountAll(ctx, run); err != nil {
		return &explore.Finding{Kind: KindRemount, Detail: fmt.Sprintf("remount failed: %v", err)}, nil
	}
	after, err := replayLeaves(ctx, run, mode)
	if err != nil {
		return nil, err
	}
	for _, lane := range run.Lanes() {
		b, a := oracle.Canonicalize(before[lane], j.Policy), oracle.Canonicalize(after[lane], j.Policy)
		if d := remountDiff(lane, b, a, mode); d != nil {
			return d, nil
		}
	}
	return nil, nil
}

// replayLeaves are the run's lanes' leaves under mode, by lane.
func replayLeaves(ctx context.Context, run *session.Run, mode agentv1.TimeMode) (map[string][]*agentv1.Entry, error) {
	out := make(map[string][]*agentv1.Entry)
	for _, lane := range run.Lanes() {
		req := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: mode, Leaves: true}}}
		resp, err := run.CallOK(ctx, "fingerprint "+lane, req)
		if err != nil {
			return nil, err
		}
		out[lane] = resp.GetFingerprint().GetLeaves()
	}
	return out, nil
}

// remountAll unmounts and mounts every lane of run: a finding of a run
// with the remount revert ran each op of its trace on freshly mounted
// lanes.
func remountAll(ctx context.Context, run *session.Run) error {
	for _, s := range []string{"umount", "mount"} {
		op, err := opspec.ParseRequest(s)
		if err != nil {
			return err
		}
		results, err := run.Apply(ctx, op)
		if err != nil {
			return err
		}
		for _, r := range results {
			if r.Errno != 0 {
				return fmt.Errorf("%s of lane %s: errno %d", s, r.Lane, r.Errno)
			}
		}
	}
	return nil
}

// exploreResults are session's lane results as explore's.
func exploreResults(rs []session.LaneResult) []explore.LaneResult {
	out := make([]explore.LaneResult, len(rs))
	for i, r := range rs {
		out[i] = explore.LaneResult{Lane: r.Lane, Errno: r.Errno}
	}
	return out
}

// ErrnoList is a step's results as "lane=errno" words.
func (s ReplayStep) ErrnoList() []string {
	out := make([]string, len(s.Results))
	for i, r := range s.Results {
		out[i] = fmt.Sprintf("%s=%d", r.Lane, r.Errno)
	}
	return out
}

// String is the step as a line: the op and its errnos.
func (s ReplayStep) String() string { return s.Op + " " + strings.Join(s.ErrnoList(), " ") }

// MaxBisectImages bounds Bisect's images.
const MaxBisectImages = 16

// Bisected is a finding replayed on images in order (Bisect).
type Bisected struct {
	Finding string
	Rows    []BisectRow
	// FirstDiffer is the first image whose outcome differs from the
	// first's ("": none).
	FirstDiffer string
}

// BisectRow is one image's replay.
type BisectRow struct {
	Image, Kernel, Session string
	Reproduced             bool
	// Detail is what the replay showed, in words.
	Detail string
}

// Bisect replays f on every image in order (each a session of its own)
// and names the first whose outcome (reproduced or not) differs from the
// first image's. The list is the caller's order, not a search: every
// image is replayed, so a flaky outcome shows too.
func Bisect(ctx context.Context, m *session.Manager, f *session.Finding, images []string) (*Bisected, error) {
	if len(images) < 2 || len(images) > MaxBisectImages {
		return nil, errkind.Invalid("images", "%d given: want 2 to %d images, in order", len(images), MaxBisectImages)
	}
	for i, img := range images {
		if img == "" {
			return nil, errkind.Invalid(fmt.Sprintf("images[%d]", i), "empty: want a name or key of the image cache")
		}
	}
	b := &Bisected{Finding: f.ID}
	for _, img := range images {
		rep, err := Replay(ctx, m, f, ReplayOn{Image: img})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img, err)
		}
		row := BisectRow{Image: img, Session: rep.Session, Reproduced: rep.Reproduced,
			Detail: fmt.Sprintf("errno differs %v, state differs %v", rep.ErrnoDiverged, rep.StateDiverged)}
		if rep.Booted != nil {
			row.Kernel = rep.Booted.KernelVersion
		}
		if rep.Reference != "" {
			row.Detail = rep.Reference
		}
		if b.FirstDiffer == "" && len(b.Rows) > 0 && row.Reproduced != b.Rows[0].Reproduced {
			b.FirstDiffer = img
		}
		b.Rows = append(b.Rows, row)
	}
	return b, nil
}
