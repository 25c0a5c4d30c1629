package clocksweep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/clock"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/relay"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
)

// clockSlack is how far past the value a clock-driven op may stamp and
// still count as stamped at the value: the guest clock runs between
// SetClock and the op.
const clockSlack = 2 * time.Second

// Contrast values: the clamped state (2^31 on a 128-byte-inode lane) is
// compared with a state made at a representable time.
const (
	contrastValue     = clock.S32Max + 1
	contrastReference = clock.S32Max - 1
)

// Options are the inputs of Run.
type Options struct {
	// Lanes are lane specs, as for session.CreateOptions.
	Lanes []string
	// Plan is the values (default clock.DefaultPlan()).
	Plan clock.Plan
	// Ops are the workload ops (default Plan.Ops, else clock.Ops()).
	Ops []string
	// Shard and Shards select shard Shard of Shards of the plan
	// (clock.Shard; Shards 0 means 1). The fingerprint contrast runs in
	// shard 0 only.
	Shard, Shards int
	// MemoryMiB is guest RAM in MiB (default 128).
	MemoryMiB int
	// Image is the guest image to boot (session.CreateOptions.Image).
	Image string
	// Backend is the machine backend, as for session.CreateOptions: "" or "auto", "qemu"
	// or "kvm".
	Backend string
	// NoContrast skips the fingerprint contrast.
	NoContrast bool
}

// Cell is one lane × value × op of a sweep.
type Cell struct {
	Lane string `json:"lane"`
	FS   string `json:"fs"`
	// InodeSize is bytes per inode for ext lanes (0 for vfat).
	InodeSize int `json:"inode_size,omitempty"`
	// Name is the plan value's name; Kind its kind.
	Name string     `json:"name"`
	Kind clock.Kind `json:"kind,omitempty"`
	// Value and ValueNs are the time set (the last step's, for rollback and near).
	Value   int64  `json:"value"`
	ValueNs int64  `json:"value_ns"`
	Op      string `json:"op"`
	// Field is the timestamp read back (mtime, ctime or atime).
	Field clock.Field `json:"field"`
	// Guest is the guest's stat after the op and a sync; OnDisk the inode
	// read on the host with debugfs (ext lanes only; nil for vfat or when
	// rejected); AfterRemount the guest's stat after umount+mount.
	Guest        clock.Timespec  `json:"guest"`
	OnDisk       *clock.Timespec `json:"on_disk,omitempty"`
	AfterRemount clock.Timespec  `json:"after_remount"`
	// Errno is the refusal of SetClock or the op (0: none).
	Errno int32 `json:"errno,omitempty"`
	// Verdict is the verdict's short form; ClampedTo the second clamped to.
	// A cell whose op (or a read after it) lost the guest has its death's
	// verdict (relay.KernelCrash, with Kernel; relay.Hung, relay.Died) and
	// no views: the sweep went on in a fresh session.
	Verdict   string `json:"verdict"`
	ClampedTo int64  `json:"clamped_to,omitempty"`
	// Expected is clock.Expect's verdict for the lane (for a clock-driven
	// op, the value as if stamped at once).
	Expected string `json:"expected,omitempty"`
	// Touches, DistinctGuest and DistinctOnDisk are a probe's: touches made
	// and distinct stored times (with ns) in the guest view and on disk.
	Touches        int `json:"touches,omitempty"`
	DistinctGuest  int `json:"distinct_guest,omitempty"`
	DistinctOnDisk int `json:"distinct_on_disk,omitempty"`
	// Kernel is the kernel's report of a kernel-crash cell.
	Kernel *kreport.Report `json:"kernel,omitempty"`
}

// Contrast is the fingerprint contrast of one ext lane: the state made at
// Value (2^31) against the state made at Reference (2^31-2).
type Contrast struct {
	Lane string `json:"lane"`
	// Value, Reference are the times set; Stored is the file's mtime
	// second at Value; Clamped is Stored != Value.
	Value     int64 `json:"value"`
	Reference int64 `json:"reference"`
	Stored    int64 `json:"stored"`
	Clamped   bool  `json:"clamped"`
	// TimeExcludedEqual: the TIME_MODE_NONE (Metis-parity) fingerprints of
	// the two states are equal (expected). TimeIncludedEqual: the
	// TIME_MODE_ALL ones are (not expected).
	TimeExcludedEqual bool `json:"time_excluded_equal"`
	TimeIncludedEqual bool `json:"time_included_equal"`
	// FirstDiff is the first path where the TIME_MODE_ALL leaves differ
	// ("" is the lane root, whose mtime the create changed too; meaningful
	// when TimeIncludedEqual is false).
	FirstDiff string `json:"first_diff"`
}

// Summary is the outcome of a clock sweep.
type Summary struct {
	// Session is the sweep's session (ended when Run returns).
	Session string `json:"session"`
	// Cells counts cells reported; ByVerdict by verdict kind.
	Cells     int            `json:"cells"`
	ByVerdict map[string]int `json:"by_verdict"`
	// Contrast is per ext lane (shard 0 only).
	Contrast []Contrast `json:"contrast,omitempty"`
	// Elapsed is the sweep's wall time, boot excluded; Boot the boot time.
	Elapsed time.Duration `json:"elapsed"`
	Boot    time.Duration `json:"boot"`
	// CellsPerSec is Cells / Elapsed (cells of all lanes; one restore
	// serves every lane of a value × op).
	CellsPerSec float64 `json:"cells_per_sec"`
	// Sessions are every session the sweep used, Session first; Deaths
	// the guests lost (a cell that lost one went on in a fresh session).
	Sessions []string `json:"sessions,omitempty"`
	Deaths   int      `json:"deaths,omitempty"`
}

// validate checks o and fills its defaults; it returns the lane specs
// and the shard of the plan to run.
func validate(o *Options) ([]guest.LaneSpec, clock.Plan, error) {
	co := session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Backend: o.Backend}
	specs, err := session.ValidateCreate(&co)
	if err != nil {
		return nil, clock.Plan{}, err
	}
	o.MemoryMiB, o.Backend = co.MemoryMiB, co.Backend
	for _, sp := range specs {
		if err := Supports(sp); err != nil {
			return nil, clock.Plan{}, errkind.Invalid("lanes", "lane %s: %v", sp.Name, err)
		}
	}
	if len(o.Plan.Values) == 0 && o.Plan.Name == "" && len(o.Plan.Ops) == 0 {
		o.Plan = clock.DefaultPlan()
	}
	if err := o.Plan.Check(); err != nil {
		return nil, clock.Plan{}, errkind.Invalid("plan", "%v", err)
	}
	if len(o.Ops) == 0 {
		o.Ops = o.Plan.Ops
	}
	if len(o.Ops) == 0 {
		o.Ops = clock.Ops()
	}
	if err := clock.CheckOps(o.Ops); err != nil {
		return nil, clock.Plan{}, errkind.Invalid("ops", "%v", err)
	}
	if o.Shards == 0 {
		o.Shards = 1
	}
	plan, err := clock.Shard(o.Plan, o.Shard, o.Shards)
	if err != nil {
		return nil, clock.Plan{}, errkind.Invalid("shard", "%v", err)
	}
	return specs, plan, nil
}

// Run creates a session for o.Lanes and, for each value of the
// plan's shard and each op that applies to it, restores the root
// checkpoint, sets the guest clock (or, for utimensat, the explicit time),
// runs the op on a fresh file in every lane, syncs and reads three views
// back: the guest's stat, the inode on disk (ext lanes, debugfs over the
// resolved overlay) and stat after umount+mount. cell (optional) gets every
// cell as it is classified. In shard 0 the fingerprint contrast follows.
//
// A value the guest refuses (SetClock outside what settimeofday takes, an
// op's errno) is a cell with verdict rejected, not an error. A lane whose
// op (or a read after it) loses the guest gets the death as its cell's
// verdict (relay: kernel-crash with the report), its session ends failed,
// and the sweep goes on in a fresh one: the cell again for the lanes left,
// then the next cells. Bad options are a FieldError. The session is busy
// while the sweep runs and ends with it ("sweep finished", "sweep failed:
// ...").
func Run(ctx context.Context, m *session.Manager, o Options, cell func(Cell)) (_ *Summary, err error) {
	specs, plan, err := validate(&o)
	if err != nil {
		return nil, err
	}
	ch, ctx, err := relay.Start(ctx, m, session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Backend: o.Backend, Image: o.Image}, "sweep")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ch.Close()) }()
	run := ch.Run()
	w := &sweeper{chain: ch.Chain, run: run, specs: specs, image: filepath.Join(ch.Dir, "lane.img"), at: allLanes}
	sum := &Summary{Session: run.ID(), ByVerdict: make(map[string]int), Boot: run.Boot()}
	start := time.Now()
	run.Event(ctx, "sweep.started", fmt.Sprintf(
		"plan %s, %d values, ops %s, shard %d/%d", plan.Name, len(plan.Values), strings.Join(o.Ops, ","), o.Shard, o.Shards), nil)
	runErr := w.sweep(ctx, plan, o.Ops, func(c Cell) {
		sum.Cells++
		kind, _, _ := strings.Cut(c.Verdict, "(")
		sum.ByVerdict[kind]++
		if cell != nil {
			cell(c)
		}
	})
	if runErr == nil && o.Shard == 0 && !o.NoContrast {
		if runErr = w.live(ctx); runErr == nil {
			sum.Contrast, runErr = w.contrast(ctx)
		}
	}
	sum.Sessions, sum.Deaths = ch.Sessions(), ch.Deaths()
	sum.Elapsed = time.Since(start)
	if secs := sum.Elapsed.Seconds(); secs > 0 {
		sum.CellsPerSec = float64(sum.Cells) / secs
	}
	run.Event(context.WithoutCancel(ctx), "sweep.finished", fmt.Sprintf("%d cells, %v, %d guests lost", sum.Cells, sum.ByVerdict, sum.Deaths), nil)
	return sum, ch.Finish(runErr)
}

// sweeper drives a sweep's machine through its run's locked calls, in
// the chain's current session.
type sweeper struct {
	chain *relay.Chain
	run   *session.Run
	specs []guest.LaneSpec
	image string // scratch file for the on-disk view
	root  vmm.CheckpointID
	// at is the lane whose step runs (allLanes: a step of every lane's,
	// the restore or a sync): a death there is that lane's.
	at int
}

// allLanes is sweeper.at during a step of all lanes.
const allLanes = -1

const sweepFile = "clk"

// sweepDir is the directory clock.OpDirEntry creates its entry in.
const sweepDir = "clkd"

func (w *sweeper) sweep(ctx context.Context, plan clock.Plan, ops []string, emit func(Cell)) error {
	var err error
	if w.root, err = w.run.Checkpoint(ctx, "root checkpoint"); err != nil {
		return err
	}
	for _, v := range plan.Values {
		for _, op := range v.Ops(ops) {
			cells, err := w.cellGoingOn(ctx, v, op)
			if err != nil {
				return fmt.Errorf("value %s, op %s: %w", v.Name, op, err)
			}
			for _, c := range cells {
				emit(c)
			}
		}
	}
	return nil
}

func (w *sweeper) restore(ctx context.Context) error {
	w.at = allLanes
	return w.run.Restore(ctx, "restore root", w.root)
}

// cellGoingOn runs cell v × op until every lane has its verdict: a lane
// whose step loses the guest gets the death as its verdict (a step of
// every lane's: each lane left), and the cell runs again in a fresh
// session (live) for the lanes left. Each run of it has one lane fewer,
// or ends.
func (w *sweeper) cellGoingOn(ctx context.Context, v clock.Value, op string) ([]Cell, error) {
	dead := map[int]Cell{}
	for {
		if err := w.live(ctx); err != nil {
			return nil, err
		}
		cells, err := w.cell(ctx, v, op, dead)
		base := w.baseCells(v, op)
		d, lost := relay.Of(ctx, err)
		if !lost {
			for i, c := range dead {
				cells[i] = c
			}
			return cells, err
		}
		w.chain.Lost(d)
		w.run.Log().Warn("a sweep cell lost the guest: the sweep goes on in a fresh session", zap.String("value", v.Name), zap.String("op", op), zap.Int("lane", w.at), zap.String("death", d.Summary()))
		for i := range w.specs {
			if _, ok := dead[i]; !ok && (w.at == allLanes || w.at == i) {
				dead[i] = deathCell(base[i], d)
			}
		}
	}
}

// deathCell is c, whose step lost the guest (d), with the death's verdict.
func deathCell(c Cell, d *relay.Death) Cell {
	return Cell{Lane: c.Lane, FS: c.FS, InodeSize: c.InodeSize, Name: c.Name, Kind: c.Kind, Value: c.Value, ValueNs: c.ValueNs,
		Op: c.Op, Field: c.Field, Expected: c.Expected, Verdict: d.Verdict(), Kernel: d.Report}
}

// live makes the sweeper's session one whose guest lives: after a death,
// a fresh one (relay.Chain.Live) with its own root checkpoint.
func (w *sweeper) live(ctx context.Context) error {
	run, replaced, err := w.chain.Live()
	if err != nil || !replaced {
		return err
	}
	w.run = run
	if w.root, err = run.Checkpoint(ctx, "root checkpoint"); err != nil {
		return fmt.Errorf("the root checkpoint of session %s, after the guest died: %w", run.ID(), err)
	}
	return nil
}

func pbTime(t clock.Timespec) *agentv1.Timespec { return &agentv1.Timespec{Sec: t.Sec, Nsec: t.Nsec} }

func fromPB(t *agentv1.Timespec) clock.Timespec {
	return clock.Timespec{Sec: t.GetSec(), Nsec: t.GetNsec()}
}

// setClock sets the guest clock; a refusal is its errno.
func (w *sweeper) setClock(ctx context.Context, t clock.Timespec) (int32, error) {
	resp, err := w.run.Call(ctx, "set clock", agent.NewRequest(&agentv1.SetClock{Time: pbTime(t)}))
	if err != nil {
		return 0, err
	}
	return resp.GetErrno(), nil
}

// opReq is one lane's op at step t (t used by utimensat only).
func opReq(op, lane string, t clock.Timespec) *agentv1.Request {
	switch op {
	case clock.OpCreate:
		return agent.NewRequest(&agentv1.Create{Lane: lane, Path: sweepFile, Flags: agent.OpenWronly | agent.OpenCreat, Mode: 0o644})
	case clock.OpWrite:
		return agent.NewRequest(&agentv1.Write{Lane: lane, Path: sweepFile, Data: []byte("y")})
	case clock.OpTouch:
		now := &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_NOW}
		return agent.NewRequest(&agentv1.Utimens{Lane: lane, Path: sweepFile, Atime: now, Mtime: now})
	case clock.OpUtimensat:
		set := &agentv1.TimeValue{Kind: agentv1.TimeValue_KIND_SET, Time: pbTime(t)}
		return agent.NewRequest(&agentv1.Utimens{Lane: lane, Path: sweepFile, Atime: set, Mtime: set})
	case clock.OpMkdir:
		return agent.NewRequest(&agentv1.Mkdir{Lane: lane, Path: sweepFile, Mode: 0o755})
	case clock.OpRename:
		return agent.NewRequest(&agentv1.Rename{Lane: lane, Path: sweepFile, NewPath: sweepFile + ".r"})
	case clock.OpChmod:
		return agent.NewRequest(&agentv1.Chmod{Lane: lane, Path: sweepFile, Mode: 0o600})
	case clock.OpSetxattr:
		return agent.NewRequest(&agentv1.Setxattr{Lane: lane, Path: sweepFile, Name: "user.themis", Value: []byte("v")})
	case clock.OpTruncate:
		// Up, from the prepared byte: a size change stamps mtime and
		// ctime (POSIX truncate(2); xfstests generic/313).
		return agent.NewRequest(&agentv1.Truncate{Lane: lane, Path: sweepFile, Length: 4096})
	case clock.OpDirEntry:
		return agent.NewRequest(&agentv1.Create{Lane: lane, Path: sweepDir + "/" + sweepFile, Flags: agent.OpenWronly | agent.OpenCreat, Mode: 0o644})
	case clock.OpRead:
		// A byte: a read of none returns before the kernel touches the
		// atime (file_accessed), and the cell measured nothing.
		return agent.NewRequest(&agentv1.ReadFile{Lane: lane, Path: sweepFile, Length: 1})
	}
	panic("sweep: unknown op " + op)
}

// target is the path an op's timestamp is read from.
func target(op string) string {
	switch op {
	case clock.OpRename:
		return sweepFile + ".r"
	case clock.OpDirEntry:
		return sweepDir
	}
	return sweepFile
}

// prepare is what a cell of op makes at the root's clock before the op:
// a fresh file with content (nil for create and mkdir, which make their
// own), or for a directory entry the directory.
func prepare(op, lane string) *agentv1.Request {
	switch op {
	case clock.OpCreate, clock.OpMkdir:
		return nil
	case clock.OpDirEntry:
		return agent.NewRequest(&agentv1.Mkdir{Lane: lane, Path: sweepDir, Mode: 0o755})
	}
	return agent.NewRequest(&agentv1.Write{Lane: lane, Path: sweepFile, Flags: agent.OpenWronly | agent.OpenCreat, Data: []byte("x")})
}

func field(st *agentv1.StatResult, f clock.Field) clock.Timespec {
	switch f {
	case clock.Atime:
		return fromPB(st.GetAtime())
	case clock.Ctime:
		return fromPB(st.GetCtime())
	}
	return fromPB(st.GetMtime())
}

func diskField(t guest.InodeTimes, f clock.Field) clock.Timespec {
	switch f {
	case clock.Atime:
		return clock.Timespec{Sec: t.Atime, Nsec: t.AtimeNs}
	case clock.Ctime:
		return clock.Timespec{Sec: t.Ctime, Nsec: t.CtimeNs}
	}
	return clock.Timespec{Sec: t.Mtime, Nsec: t.MtimeNs}
}

// stat returns a lane's path's field in the guest view.
func (w *sweeper) stat(ctx context.Context, lane, path string, f clock.Field) (clock.Timespec, error) {
	resp, err := w.run.CallOK(ctx, "stat "+lane+"/"+path, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: path}))
	if err != nil {
		return clock.Timespec{}, err
	}
	return field(resp.GetStat(), f), nil
}

// onDisk syncs the guest and reads lane i's path's field from the resolved
// overlay with debugfs; nil for a lane without an on-disk reader (vfat).
func (w *sweeper) onDisk(ctx context.Context, i int, path string, f clock.Field) (*clock.Timespec, error) {
	if !strings.HasPrefix(w.specs[i].FS, "ext") {
		return nil, nil
	}
	if err := w.run.Disk(ctx, i, "lane image", func(d *overlay.Device) error {
		return scratch.WriteImage(w.image, d, d.Size())
	}); err != nil {
		return nil, fmt.Errorf("on-disk view: %w", err)
	}
	it, err := guest.ExtInodeTimes(ctx, w.image, "/"+path)
	if err != nil {
		return nil, err
	}
	t := diskField(it, f)
	return &t, nil
}

func (w *sweeper) sync(ctx context.Context) error {
	_, err := w.run.CallOK(ctx, "sync", &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
	return err
}

func (w *sweeper) remount(ctx context.Context, lane string) error {
	if _, err := w.run.CallOK(ctx, "umount "+lane, agent.NewRequest(&agentv1.Umount{Lane: lane})); err != nil {
		return err
	}
	_, err := w.run.CallOK(ctx, "mount "+lane, agent.NewRequest(&agentv1.Mount{Lane: lane}))
	return err
}

// baseCells are the cells of v × op, one per lane, before any view.
func (w *sweeper) baseCells(v clock.Value, op string) []Cell {
	f, _ := clock.OpField(op)
	steps := v.Steps()
	set := steps[len(steps)-1]
	cells := make([]Cell, len(w.specs))
	for i, sp := range w.specs {
		cells[i] = Cell{Lane: sp.Name, FS: sp.FS, InodeSize: sp.InodeSize, Name: v.Name, Kind: v.Kind,
			Value: set.Sec, ValueNs: set.Nsec, Op: op, Field: f}
		if e, err := clock.ExpectCell(laneOf(sp), op, steps); err == nil && v.Kind != clock.KindProbe {
			cells[i].Expected = e.Verdict.String() // a probe has no single value to expect
		}
	}
	return cells
}

// cell runs one value × op on every lane but those of skip (they have
// their verdict).
func (w *sweeper) cell(ctx context.Context, v clock.Value, op string, skip map[int]Cell) ([]Cell, error) {
	cells := w.baseCells(v, op)
	if err := w.restore(ctx); err != nil {
		return nil, err
	}
	// What the op needs, made at the root's clock (prepare).
	for i, sp := range w.specs {
		req := prepare(op, sp.Name)
		if _, ok := skip[i]; ok || req == nil {
			continue
		}
		w.at = i
		if _, err := w.run.CallOK(ctx, "prepare "+sp.Name, req); err != nil {
			return nil, err
		}
	}
	if v.Kind == clock.KindProbe {
		return cells, w.probe(ctx, v, cells, skip)
	}
	rejected, err := w.apply(ctx, v.Steps(), op, skip)
	if err != nil {
		return nil, err
	}
	w.at = allLanes
	if err := w.sync(ctx); err != nil {
		return nil, err
	}
	for i := range w.specs {
		if _, ok := skip[i]; ok {
			continue
		}
		w.at = i
		if err := w.views(ctx, i, &cells[i], rejected[i], v.Steps()); err != nil {
			return nil, err
		}
	}
	return cells, nil
}

// apply runs op at each step on every lane but skip's, each refusal its
// lane's errno.
func (w *sweeper) apply(ctx context.Context, steps []clock.Timespec, op string, skip map[int]Cell) ([]int32, error) {
	rejected := make([]int32, len(w.specs))
	for _, st := range steps {
		for i, sp := range w.specs {
			if _, ok := skip[i]; ok || rejected[i] != 0 {
				continue
			}
			w.at = i
			// The clock is set right before each lane's op, not once for
			// all: on a loaded host the lanes' round trips would add up
			// past clockSlack.
			if clock.UsesClock(op) {
				errno, err := w.setClock(ctx, st)
				if err != nil {
					return nil, err
				}
				if rejected[i] = errno; errno != 0 {
					continue
				}
			}
			resp, err := w.run.Call(ctx, op+" "+sp.Name, opReq(op, sp.Name, st))
			if err != nil {
				return nil, err
			}
			rejected[i] = resp.GetErrno()
		}
	}
	return rejected, nil
}

// views reads lane i's three views of c's op (applied at steps; errno its
// refusal) and gives c its verdict.
func (w *sweeper) views(ctx context.Context, i int, c *Cell, errno int32, steps []clock.Timespec) error {
	sp := w.specs[i]
	if errno != 0 {
		c.Errno = errno
		c.Verdict = clock.Reject(c.Errno).String()
		return nil
	}
	path, set := target(c.Op), steps[len(steps)-1]
	var err error
	if c.Guest, err = w.stat(ctx, sp.Name, path, c.Field); err != nil {
		return err
	}
	if c.OnDisk, err = w.onDisk(ctx, i, path, c.Field); err != nil {
		return err
	}
	if err := w.remount(ctx, sp.Name); err != nil {
		return err
	}
	if c.AfterRemount, err = w.stat(ctx, sp.Name, path, c.Field); err != nil {
		return err
	}
	eff := set
	if clock.UsesClock(c.Op) && c.Guest.Compare(set) >= 0 && c.Guest.Sec-set.Sec < int64(clockSlack/time.Second) {
		eff = c.Guest // the clock ran between SetClock and the op
	}
	vd := clock.Classify(eff, c.Guest, c.OnDisk, c.AfterRemount)
	if r, err := clock.RuleFor(laneOf(sp), c.Field); err == nil {
		vd = r.Explain(c.Op, vd.Prefer(r.Granularity, eff, c.Guest), eff, c.Guest, c.AfterRemount)
	}
	c.Verdict, c.ClampedTo = vd.String(), vd.ClampedTo
	return nil
}

// laneOf is what clock's rules need of a lane spec.
// Supports reports whether the sweep has clock rules for lane sp (nil: it
// has; Run refuses a lane without).
func Supports(sp guest.LaneSpec) error {
	_, err := clock.RuleFor(laneOf(sp), clock.Mtime)
	return err
}

func laneOf(sp guest.LaneSpec) clock.Lane {
	return clock.Lane{FS: sp.FS, InodeSize: sp.InodeSize, Options: sp.Options}
}

// probe makes v.Touches rapid touches at v's clock and counts distinct
// stored times in the guest view and on disk.
func (w *sweeper) probe(ctx context.Context, v clock.Value, cells []Cell, skip map[int]Cell) error {
	n := v.Touches
	if n == 0 {
		n = clock.DefaultTouches
	}
	w.at = allLanes
	if errno, err := w.setClock(ctx, v.Time()); err != nil || errno != 0 {
		for i := range cells {
			cells[i].Errno = errno
			cells[i].Verdict = clock.Reject(errno).String()
		}
		return err
	}
	guestSeen := make([]map[clock.Timespec]bool, len(w.specs))
	diskSeen := make([]map[clock.Timespec]bool, len(w.specs))
	for i := range w.specs {
		guestSeen[i], diskSeen[i] = map[clock.Timespec]bool{}, map[clock.Timespec]bool{}
	}
	guestTimes := make([][]clock.Timespec, len(w.specs))
	for range n {
		// Each lane is stat'ed right after its touch; the on-disk view
		// of every lane follows a sync per round.
		for i, sp := range w.specs {
			if _, ok := skip[i]; ok {
				continue
			}
			w.at = i
			if _, err := w.run.CallOK(ctx, "touch "+sp.Name, opReq(clock.OpTouch, sp.Name, clock.Timespec{})); err != nil {
				return err
			}
			g, err := w.stat(ctx, sp.Name, sweepFile, clock.Mtime)
			if err != nil {
				return err
			}
			guestSeen[i][g] = true
			guestTimes[i] = append(guestTimes[i], g)
		}
		w.at = allLanes
		if err := w.sync(ctx); err != nil {
			return err
		}
		for i := range w.specs {
			if _, ok := skip[i]; ok {
				continue
			}
			d, err := w.onDisk(ctx, i, sweepFile, clock.Mtime)
			if err != nil {
				return err
			}
			if d != nil {
				diskSeen[i][*d] = true
			}
		}
	}
	for i, sp := range w.specs {
		if _, ok := skip[i]; ok {
			continue
		}
		w.at = i
		c := &cells[i]
		c.Touches, c.DistinctGuest, c.DistinctOnDisk = n, len(guestSeen[i]), len(diskSeen[i])
		c.Guest = guestTimes[i][n-1]
		var err error
		if c.OnDisk, err = w.onDisk(ctx, i, sweepFile, clock.Mtime); err != nil {
			return err
		}
		if err := w.remount(ctx, sp.Name); err != nil {
			return err
		}
		if c.AfterRemount, err = w.stat(ctx, sp.Name, sweepFile, clock.Mtime); err != nil {
			return err
		}
		distinct := c.DistinctGuest
		if c.OnDisk != nil {
			distinct = min(distinct, c.DistinctOnDisk)
		}
		vd := clock.Verdict{Kind: clock.Represented}
		if distinct < n {
			vd = clock.Verdict{Kind: clock.Rounded}
			if c.Guest.Nsec == 0 {
				vd.Granularity = time.Second
			}
		}
		if (c.OnDisk != nil && *c.OnDisk != c.Guest) || c.AfterRemount != c.Guest {
			vd = clock.Classify(c.Guest, c.Guest, c.OnDisk, c.AfterRemount)
		}
		c.Verdict = vd.String()
	}
	return nil
}

// contrast runs the fingerprint contrast on every ext lane.
func (w *sweeper) contrast(ctx context.Context) ([]Contrast, error) {
	leaves := func(t int64) (map[string][]*agentv1.Entry, error) {
		if err := w.restore(ctx); err != nil {
			return nil, err
		}
		errno, err := w.setClock(ctx, clock.Timespec{Sec: t})
		if err != nil {
			return nil, err
		}
		if errno != 0 {
			return nil, fmt.Errorf("contrast: set clock %d: errno %d", t, errno)
		}
		out := make(map[string][]*agentv1.Entry)
		for _, sp := range w.specs {
			if _, err := w.run.CallOK(ctx, "create "+sp.Name, agent.NewRequest(&agentv1.Write{Lane: sp.Name, Path: sweepFile, Flags: agent.OpenWronly | agent.OpenCreat, Data: []byte("x")})); err != nil {
				return nil, err
			}
		}
		for _, sp := range w.specs {
			resp, err := w.run.CallOK(ctx, "fingerprint "+sp.Name, agent.NewRequest(&agentv1.Fingerprint{Lane: sp.Name, TimeMode: agentv1.TimeMode_TIME_MODE_ALL, Leaves: true}))
			if err != nil {
				return nil, err
			}
			out[sp.Name] = oracle.Canonicalize(resp.GetFingerprint().GetLeaves(), oracle.MetisParity)
		}
		return out, nil
	}
	a, err := leaves(contrastValue)
	if err != nil {
		return nil, err
	}
	b, err := leaves(contrastReference)
	if err != nil {
		return nil, err
	}
	var out []Contrast
	for _, sp := range w.specs {
		if !strings.HasPrefix(sp.FS, "ext") {
			continue
		}
		la, lb := a[sp.Name], b[sp.Name]
		c := Contrast{Lane: sp.Name, Value: contrastValue, Reference: contrastReference,
			Stored: oracle.Find(la, sweepFile).GetMtime().GetSec()}
		c.Clamped = c.Stored != contrastValue
		c.TimeExcludedEqual = bytes.Equal(oracle.Root(la, agentv1.TimeMode_TIME_MODE_NONE), oracle.Root(lb, agentv1.TimeMode_TIME_MODE_NONE))
		c.TimeIncludedEqual = bytes.Equal(oracle.Root(la, agentv1.TimeMode_TIME_MODE_ALL), oracle.Root(lb, agentv1.TimeMode_TIME_MODE_ALL))
		if p, ok := oracle.FirstDiff(la, lb, agentv1.TimeMode_TIME_MODE_ALL); ok {
			c.FirstDiff = p
		}
		out = append(out, c)
	}
	return out, nil
}
