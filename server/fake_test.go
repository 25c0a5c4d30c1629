package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/repro"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/runs/belowfs"
	"github.com/themisfs/themis/runs/check"
	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/runs/export"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// fakeDomain is a control-flow-only Domain: it records what it was called
// with and returns canned values, or err when set.
type fakeDomain struct {
	mu        sync.Mutex
	err       error
	calls     []string
	create    session.CreateOptions
	op        *agentv1.Request
	results   []session.LaneResult
	read      [2]int64 // offset, length
	limit     int
	closed    int
	onRestore func(time.Duration)
	diff      [2]session.DiffSide       // the last Diff's sides
	explore   exploration.Options       // the last Explore's options
	crash     crashcheck.Options        // the last Crash's options
	check     check.Options             // the last Check's options
	replayed  [2]string                 // the last Replay's finding and image
	passes    exploration.PassesOptions // the last ReplayPasses' options

	// When block is set, Apply signals entered and waits for block to close
	// or for its context to end.
	block   chan struct{}
	entered chan struct{}
	// unwind is how long a blocked Apply takes to return once its context
	// ends; returned is set when it has, and closedUnder when Close ran
	// while an Apply was still in flight.
	unwind  time.Duration
	freeOn  string        // with block: "" (its context ends), "stop" (StopSessions) or "never" (only block)
	stopped chan struct{} // closed by StopSessions
	pruned  []time.Time   // Prune's cutoffs
	// many, when set, is how many sessions List and findings Findings and
	// FindingsPage return (manyIDs, one second apart from t0).
	many        int
	inFlight    int
	returned    bool
	closedUnder bool
}

var _ managedDomain = (*fakeDomain)(nil)

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)
	t1 = t0.Add(90 * time.Second)
)

func (f *fakeDomain) record(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	return f.err
}

func (f *fakeDomain) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeDomain) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func fakeInfo(id string) *session.Info {
	return &session.Info{
		ID:    id,
		State: session.StateRunning,
		Lanes: []session.Lane{
			{Name: "ext2", Spec: "ext2", FS: "ext2"},
			{Name: "b", Spec: "ext4:inode_size=128,name=b", FS: "ext4"},
		},
		Backend:   "qemu",
		MemoryMiB: 256,
		Restore:   vmm.RestoreFull,
		Verify:    true,
		Created:   t0,
		Depth:     2,
	}
}

func fakeCheckpoint(id string) *session.Checkpoint {
	return &session.Checkpoint{
		ID: id, Session: "s-1", Parent: "c-0", Name: "before",
		Origin: session.OriginAuto, Slot: 3, Created: t0,
		Roots:        map[string][]byte{"b": {2}, "a": {1}},
		OverlayDepth: 4, Live: true,
	}
}

func (f *fakeDomain) Create(_ context.Context, o session.CreateOptions) (*session.Info, error) {
	if err := f.record("Create"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.create = o
	f.mu.Unlock()
	return fakeInfo("s-1"), nil
}

func (f *fakeDomain) Get(_ context.Context, id string) (*session.Info, error) {
	if err := f.record("Get"); err != nil {
		return nil, err
	}
	return fakeInfo(id), nil
}

func (f *fakeDomain) List(_ context.Context, all bool) ([]*session.Info, error) {
	if err := f.record("List"); err != nil {
		return nil, err
	}
	if n := f.many; n > 0 {
		out := make([]*session.Info, n)
		for i := range out {
			out[i] = fakeInfo(fmt.Sprintf("s-%03d", i))
			out[i].Created = t0.Add(time.Duration(i) * time.Second)
		}
		return out, nil
	}
	out := []*session.Info{fakeInfo("s-1")}
	if all {
		ended := fakeInfo("s-0")
		ended.State, ended.Ended, ended.Reason = session.StateFailed, t1, "guest died"
		out = append(out, ended)
	}
	return out, nil
}

func (f *fakeDomain) ListPage(ctx context.Context, all bool, after session.PageKey, limit int) ([]*session.Info, error) {
	infos, err := f.List(ctx, all)
	if err != nil {
		return nil, err
	}
	var out []*session.Info // in List's order, as the fake's tests expect
	for _, in := range infos {
		if (session.PageKey{Created: in.Created, ID: in.ID}).After(after) && (limit < 0 || len(out) < limit) {
			out = append(out, in)
		}
	}
	return out, nil
}

func (f *fakeDomain) Delete(context.Context, string) error { return f.record("Delete") }

func (f *fakeDomain) Fork(_ context.Context, _, name string, origin session.Origin) (*session.Checkpoint, error) {
	if err := f.record("Fork:" + string(origin)); err != nil {
		return nil, err
	}
	c := fakeCheckpoint("c-1")
	c.Name, c.Origin = name, origin
	return c, nil
}

func (f *fakeDomain) Restore(_ context.Context, _, checkpoint string) (*session.Checkpoint, time.Duration, error) {
	if err := f.record("Restore"); err != nil {
		return nil, 0, err
	}
	d := 1500 * time.Microsecond
	f.mu.Lock()
	onRestore := f.onRestore
	f.mu.Unlock()
	if onRestore != nil {
		onRestore(d)
	}
	return fakeCheckpoint(checkpoint), d, nil
}

func (f *fakeDomain) Checkpoints(context.Context, string, bool) ([]*session.Checkpoint, error) {
	if err := f.record("Checkpoints"); err != nil {
		return nil, err
	}
	return []*session.Checkpoint{fakeCheckpoint("c-1"), fakeCheckpoint("c-2")}, nil
}

func (f *fakeDomain) DeleteCheckpoint(context.Context, string, string) error {
	return f.record("DeleteCheckpoint")
}

func (f *fakeDomain) Apply(ctx context.Context, _ string, op *agentv1.Request) ([]session.LaneResult, error) {
	if err := f.record("Apply"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.op = op
	rs, block, entered := f.results, f.block, f.entered
	f.mu.Unlock()
	if block != nil {
		f.mu.Lock()
		f.inFlight++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.inFlight--
			f.returned = true
			f.mu.Unlock()
		}()
		close(entered)
		var cancelled <-chan struct{}
		switch f.freeOn {
		case "":
			cancelled = ctx.Done()
		case "stop":
			cancelled = f.stopCh()
		}
		select {
		case <-block:
		case <-cancelled:
			time.Sleep(f.unwind)
			return nil, errors.New("fake: call cut off")
		}
	}
	if rs == nil {
		rs = []session.LaneResult{{Lane: "a", Ret: 1}, {Lane: "b", Ret: 1}}
	}
	return rs, nil
}

func (f *fakeDomain) Fingerprint(_ context.Context, _ string, mode agentv1.TimeMode, leaves bool, lanes []string) ([]session.LaneFingerprint, error) {
	if err := f.record("Fingerprint"); err != nil {
		return nil, err
	}
	fp := session.LaneFingerprint{Lane: "a", Root: []byte{0xab}, Entries: 2}
	if leaves {
		fp.Leaves = []*agentv1.Entry{{Path: ""}, {Path: "f", Size: 3}}
	}
	return []session.LaneFingerprint{fp}, nil
}

func (f *fakeDomain) Hashes(context.Context, string) (session.Hashes, error) {
	if err := f.record("Hashes"); err != nil {
		return session.Hashes{}, err
	}
	return session.Hashes{Disks: map[string][32]byte{"a": {0xd1}}, RAM: [32]byte{0xaa}, HasRAM: true}, nil
}

func (f *fakeDomain) Stat(_ context.Context, _, lane, path string, _ bool) (*agentv1.StatResult, session.LaneResult, error) {
	if err := f.record("Stat"); err != nil {
		return nil, session.LaneResult{}, err
	}
	if path == "missing" {
		return nil, session.LaneResult{Lane: lane, Errno: 2, Error: "lstat missing: no such file or directory"}, nil
	}
	return &agentv1.StatResult{Kind: agentv1.Kind_KIND_REGULAR, Size: 3}, session.LaneResult{Lane: lane}, nil
}

func (f *fakeDomain) ReadFile(_ context.Context, _, _, _ string, off, length int64) ([]byte, bool, session.LaneResult, error) {
	if err := f.record("ReadFile"); err != nil {
		return nil, false, session.LaneResult{}, err
	}
	f.mu.Lock()
	f.read = [2]int64{off, length}
	f.mu.Unlock()
	return []byte("abc"), true, session.LaneResult{}, nil
}

func (f *fakeDomain) RestoreFile(context.Context, string, string, string, string) (bool, int64, error) {
	if err := f.record("RestoreFile"); err != nil {
		return false, 0, err
	}
	return true, 0, nil
}

func (f *fakeDomain) Events(_ context.Context, id string, after int64, limit int) ([]session.Event, error) {
	if err := f.record("Events"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.limit = limit
	f.mu.Unlock()
	return []session.Event{
		{Seq: after + 1, Session: id, Time: t0, Kind: "op", Detail: "mkdir d on 2 lanes",
			Results: []session.LaneResult{{Lane: "a"}, {Lane: "b", Errno: 17, Error: "exists"}}},
		{Seq: after + 2, Session: id, Time: t1, Kind: "fork", Checkpoint: "c-1"},
	}, nil
}

// stopCh is the channel StopSessions closes.
func (f *fakeDomain) stopCh() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == nil {
		f.stopped = make(chan struct{})
	}
	return f.stopped
}

// Prune implements pruner.
func (f *fakeDomain) Prune(_ context.Context, cutoff time.Time) (session.Pruned, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pruned = append(f.pruned, cutoff)
	return session.Pruned{}, nil
}

// StopSessions implements sessionStopper.
func (f *fakeDomain) StopSessions() error {
	ch := f.stopCh()
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
	return nil
}

func (f *fakeDomain) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	if f.inFlight > 0 {
		f.closedUnder = true
	}
	return nil
}

func (f *fakeDomain) Explore(_ context.Context, o exploration.Options, progress func(exploration.Progress), found func(session.Finding)) (*exploration.Summary, error) {
	if err := f.record("Explore"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.explore = o
	f.mu.Unlock()
	progress(exploration.Progress{Session: "s-1", States: 1, Unique: 1, Depth: 1})
	raw := []string{"chmod d 0700", "mkdir d 0755"}
	found(session.Finding{ID: "f-1", Session: "s-1", Kind: "errno-divergence", Trace: raw, FoundTrace: raw, OriginalLen: 2, Created: t0, LaneSpecs: o.Lanes})
	found(session.Finding{ID: "f-1", Session: "s-1", Kind: "errno-divergence", Trace: raw[1:], FoundTrace: raw, OriginalLen: 2, Minimized: true, Created: t0, LaneSpecs: o.Lanes})
	return &exploration.Summary{Session: "s-1", States: 2, Unique: 2, Findings: 1, Backend: "qemu", Roots: map[string][]byte{"b": {2}, "a": {1}}}, nil
}

// ExploreRecord is the last Explore's options and summary under "s-1".
func (f *fakeDomain) ExploreRecord(_ context.Context, id string) (*exploration.Record, error) {
	if err := f.record("ExploreRecord"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != "s-1" || f.explore.Lanes == nil {
		return nil, fmt.Errorf("run record of session %q: %w", id, errkind.ErrNotFound)
	}
	return &exploration.Record{Options: f.explore, Summary: exploration.Summary{Session: "s-1", Unique: 2, UniqueByDepth: []int{1, 1}},
		Progress: []exploration.Progress{{States: 1, Unique: 1}, {States: 2, Unique: 2, Elapsed: time.Second}}}, nil
}

func (f *fakeDomain) Findings(_ context.Context, id string) ([]session.Finding, error) {
	if err := f.record("Findings"); err != nil {
		return nil, err
	}
	if f.many > 0 {
		return f.manyFindings(session.PageKey{}, -1), nil
	}
	return []session.Finding{{ID: "f-1", Session: id, Kind: "errno-divergence", Created: t0}}, nil
}

// manyFindings are the many findings after key, at most limit (-1: all).
func (f *fakeDomain) manyFindings(after session.PageKey, limit int) []session.Finding {
	var out []session.Finding
	for i := range f.many {
		fd := session.Finding{ID: fmt.Sprintf("f-%03d", i), Session: "s-1", Kind: "errno-divergence", Created: t0.Add(time.Duration(i) * time.Second)}
		if fd.Created.After(after.Created) || fd.Created.Equal(after.Created) && fd.ID > after.ID {
			out = append(out, fd)
		}
	}
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

func (f *fakeDomain) FindingsPage(_ context.Context, id string, after session.PageKey, limit int) ([]session.Finding, error) {
	if err := f.record("FindingsPage"); err != nil {
		return nil, err
	}
	if f.many > 0 {
		return f.manyFindings(after, limit), nil
	}
	return []session.Finding{{ID: "f-1", Session: id, Kind: "errno-divergence", Created: t0}}, nil
}

func (f *fakeDomain) Finding(_ context.Context, id string) (*session.Finding, error) {
	if err := f.record("Finding"); err != nil {
		return nil, err
	}
	if id != "f-1" {
		return nil, fmt.Errorf("finding %q: %w", id, errkind.ErrNotFound)
	}
	return &session.Finding{ID: "f-1", Kind: "errno-divergence", Created: t0}, nil
}

func (f *fakeDomain) SetFindingStatus(ctx context.Context, id, status string) (*session.Finding, error) {
	if err := f.record("SetFindingStatus"); err != nil {
		return nil, err
	}
	fd, err := f.Finding(ctx, id)
	if err != nil {
		return nil, err
	}
	fd.Seen = session.Seen{Times: 1, FirstID: id, First: t0, Last: t0, Status: status, StatusTime: t0}
	return fd, nil
}

func (f *fakeDomain) Replay(_ context.Context, fd *session.Finding, on exploration.ReplayOn) (*exploration.Replayed, error) {
	if err := f.record("Replay"); err != nil {
		return nil, err
	}
	if on.Stock && on.Image != "" {
		return nil, errkind.Invalid("stock", "not with an image")
	}
	f.mu.Lock()
	f.replayed = [2]string{fd.ID, on.Image}
	f.mu.Unlock()
	return &exploration.Replayed{Finding: fd.ID, Session: "s-9", Kind: fd.Kind, Image: on.Image,
		Steps:         []exploration.ReplayStep{{Op: "mkdir d 0755", Results: []session.LaneResult{{Lane: "ext2"}, {Lane: "vfat", Errno: 1}}, Diverged: true}},
		Roots:         map[string]string{"ext2": "aa", "vfat": "bb"},
		ErrnoDiverged: true, Reproduced: true}, nil
}

func (f *fakeDomain) ReplayPasses(_ context.Context, o exploration.PassesOptions, progress func(exploration.PassProgress)) (*exploration.PassesResult, error) {
	if err := f.record("ReplayPasses"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.passes = o
	f.mu.Unlock()
	for p := range o.N {
		progress(exploration.PassProgress{Clock: "free", Pass: p + 1, Passes: o.N})
	}
	return &exploration.PassesResult{Finding: o.Finding, Sessions: []string{"s-7"}, Backend: "qemu", Trace: o.Trace,
		Rows: []exploration.PassesRow{{Clock: "free", Passes: o.N, Disks: map[string]int{o.Lanes[0]: 3}, RAM: -1}}}, nil
}

func (f *fakeDomain) Footprint(_ context.Context, fd *session.Finding, lanes []string, memoryMiB int) (*belowfs.Footprint, error) {
	if err := f.record("Footprint"); err != nil {
		return nil, err
	}
	if len(lanes) == 0 {
		lanes = []string{"ext2"}
	}
	fp := &belowfs.Footprint{Finding: fd.ID}
	for _, l := range lanes {
		fp.Lanes = append(fp.Lanes, runreport.LaneFootprint{Lane: l, Sectors: int64(8 + memoryMiB), ByRegion: []runreport.RegionSectors{{Region: "data", Sectors: 8}}})
	}
	return fp, nil
}

func (f *fakeDomain) Export(_ context.Context, fd *session.Finding, o export.Options, out export.Sinks) (*export.Summary, error) {
	if err := f.record("Export"); err != nil {
		return nil, err
	}
	if o.Policy == "lenient" {
		return nil, errkind.Invalid("policy", "unknown policy %q", o.Policy)
	}
	big := bytes.Repeat([]byte{'x'}, 3<<20/2) // two chunks
	if err := out.File("README", false, big); err != nil {
		return nil, err
	}
	if err := out.File("repro.sh", true, []byte("#!/bin/sh\n")); err != nil {
		return nil, err
	}
	return &export.Summary{Finding: fd.ID, Kind: fd.Kind, Files: []string{"README", "repro.sh"}, Stock: &repro.Stock{Kernel: "6.1.0", Reproduced: false}}, nil
}

func (f *fakeDomain) Bisect(_ context.Context, fd *session.Finding, images []string) (*exploration.Bisected, error) {
	if err := f.record("Bisect"); err != nil {
		return nil, err
	}
	if len(images) < 2 {
		return nil, errkind.Invalid("images", "%d given", len(images))
	}
	b := &exploration.Bisected{Finding: fd.ID, FirstDiffer: images[1]}
	for i, img := range images {
		b.Rows = append(b.Rows, exploration.BisectRow{Image: img, Kernel: "6.1." + strconv.Itoa(i), Reproduced: i == 0, Session: "s-" + strconv.Itoa(i)})
	}
	return b, nil
}

func (f *fakeDomain) ClockSweep(_ context.Context, o clocksweep.Options, cell func(clocksweep.Cell)) (*clocksweep.Summary, error) {
	if err := f.record("ClockSweep"); err != nil {
		return nil, err
	}
	cell(clocksweep.Cell{Lane: o.Lanes[0], Name: "2^31", Value: 1 << 31, Op: "create", Verdict: "clamped(2147483647)", ClampedTo: 1<<31 - 1})
	return &clocksweep.Summary{Session: "s-1", Cells: 1, ByVerdict: map[string]int{"clamped": 1}}, nil
}

func (f *fakeDomain) Profile(_ context.Context, o belowfs.ProfileOptions, row func(belowfs.ProfileRow)) (*belowfs.ProfileSummary, error) {
	if err := f.record("Profile"); err != nil {
		return nil, err
	}
	row(belowfs.ProfileRow{Lane: "ext2", Op: "chmod f 0600", SectorsWritten: 2, Written: []belowfs.LBARange{{First: 14, Count: 2, Region: "inode-table"}}})
	return &belowfs.ProfileSummary{Session: "s-1", Rows: 1,
		Layout:   map[string][]belowfs.LBARange{"ext2": {{First: 2, Count: 2, Region: "superblock"}}},
		Inferred: map[string][]belowfs.LBARange{"ext2": {{First: 14, Count: 2, Region: "inode-table"}}}}, nil
}

func (f *fakeDomain) Corrupt(_ context.Context, o belowfs.CorruptOptions, res func(belowfs.CorruptResult)) (*belowfs.CorruptSummary, error) {
	if err := f.record("Corrupt"); err != nil {
		return nil, err
	}
	res(belowfs.CorruptResult{Lane: "ext2", Target: "superblock.magic", LBA: 2, Offset: 56, Class: "fatal"})
	return &belowfs.CorruptSummary{Session: "s-1", Results: 1, ByClass: map[string]int{"fatal": 1}}, nil
}

// Crash records the options and sends one dirty state of lane "ext2".
func (f *fakeDomain) Crash(_ context.Context, o crashcheck.Options, out crashcheck.Sinks) (*crashcheck.Summary, error) {
	if err := f.record("Crash"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.crash = o
	f.mu.Unlock()
	out.Result(crashcheck.Result{Session: "s-c", Lane: "ext2", Index: 3, Verdict: crashcheck.Dirty, Output: "Inode bitmap differences",
		State: crash.State{Keep: []int{0, 2, 5}, Flushes: 1, Kind: crash.KindSubset, Epoch: []int{4, 5, 6}}})
	out.Finding(session.Finding{ID: "f-c", Kind: session.KindCrash, Trace: o.Trace, LaneSpecs: o.Lanes,
		Crash: &session.CrashPoint{Lane: "ext2", Keep: []int{0, 2, 5}, Flushes: 1, Verdict: crashcheck.Dirty}})
	if o.StreamImage {
		if err := out.Image("ext2", 4096, []byte{1, 2}, 8192); err != nil {
			return nil, err
		}
	}
	return &crashcheck.Summary{Findings: 1, Session: "s-1", Lanes: map[string]*crashcheck.LaneSummary{"ext2": {Writes: 6, Flushes: 2, States: 9, Dirty: 1}}}, nil
}

// Check records the options and runs two parts: a clock part with one
// cell against its rule and a differential part with one finding.
func (f *fakeDomain) Check(_ context.Context, o check.Options, out check.Sinks) (*check.Summary, error) {
	if err := f.record("Check"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.check = o
	f.mu.Unlock()
	parts := []check.Part{
		{Kind: check.KindClock, Lanes: o.Lanes, Budget: time.Minute, Findings: 1,
			Cells: []clocksweep.Cell{{Lane: "exfat", Op: "mkdir", Verdict: "diverged(x)", Expected: "represented"}}},
		{Kind: check.KindDifferential, Lanes: append(o.Lanes, "ext2"), Budget: 2 * time.Minute, Findings: 1, Stopped: "max-duration",
			Explore: &exploration.Summary{Session: "s-2", Findings: 1}},
		{Kind: check.KindCrash, Lanes: o.Lanes, Skipped: "lane exfat has no host checker"},
	}
	for i := range parts {
		p := &parts[i]
		if p.Skipped == "" {
			out.Started(p)
		}
		switch p.Kind {
		case check.KindClock:
			out.Cell(p, p.Cells[0])
		case check.KindDifferential:
			out.Progress(p, exploration.Progress{States: 7})
			out.Found(p, session.Finding{ID: "f-d", Kind: "state", Session: "s-2"})
		}
		out.Done(p)
	}
	return &check.Summary{Lanes: o.Lanes, Reference: "ext2", ReferenceWhy: "why", Parts: parts, Findings: 2, Budget: o.Budget}, nil
}

func (f *fakeDomain) Diff(_ context.Context, a, b session.DiffSide, normalize bool) (*fsimage.DiffResult, error) {
	if err := f.record("Diff"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.diff = [2]session.DiffSide{a, b}
	f.mu.Unlock()
	return &fsimage.DiffResult{RawSectors: 3, NormalizedSectors: 1, Normalized: normalize,
		Ranges: []fsimage.DiffRange{{Offset: 7168, Len: 4, Region: "inode-table"}}}, nil
}
