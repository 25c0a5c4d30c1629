package belowfs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/api"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// DefaultProfileOps are the ops of the paper's Table 2 (ext2 write and
// metadata amplification), each run from the state DefaultProfileSetup
// makes: f exists, empty, and everything is on disk.
var DefaultProfileOps = api.DefaultProfileOps

// DefaultProfileReadOps are the read-side rows of the paper's Table 4 that
// are whole commands rather than one syscall: ls of a directory and find
// over the nested tree and over the whole lane (the paper's "full walk"),
// on the tree ProfileTree builds.
var DefaultProfileReadOps = []string{"ls dir", "find tree", "find /"}

// DefaultProfileSetup is the state every default profile op starts from;
// the default setup is it followed by ProfileTree.
var DefaultProfileSetup = []string{"create f 0644", "sync"}

// Sizes of the default setup's tree (ProfileOptions.LsFiles, TreeEntries).
// The paper gives none for ls; for find its text breaks off at "a full
// find over 8".
const (
	DefaultLsFiles     = api.DefaultLsFiles
	DefaultTreeEntries = api.DefaultTreeEntries
	maxProfileTree     = 4096
)

// treeChildren are the names each directory of ProfileTree's nested tree
// gets, in order: two subdirectories and two files.
var treeChildren = []struct {
	name string
	dir  bool
}{{"d0", true}, {"f0", false}, {"d1", true}, {"f1", false}}

// ProfileTree returns the setup ops of the read rows' tree: directory dir
// holding that many empty files f0, f1, ...; and directory tree with entries
// entries below it, made breadth-first, each directory getting d0, f0, d1,
// f1 (so 8 entries are tree/{d0,f0,d1,f1} and tree/d0/{d0,f0,d1,f1}, two
// levels).
func ProfileTree(files, entries int) []string {
	ops := []string{"mkdir dir 0755"}
	for i := range files {
		ops = append(ops, fmt.Sprintf("create dir/f%d 0644", i))
	}
	ops = append(ops, "mkdir tree 0755")
	queue := []string{"tree"}
	for made := 0; made < entries; {
		parent := queue[0]
		queue = queue[1:]
		for _, c := range treeChildren {
			if made == entries {
				break
			}
			p := parent + "/" + c.name
			if c.dir {
				ops = append(ops, "mkdir "+p+" 0755")
				queue = append(queue, p)
			} else {
				ops = append(ops, "create "+p+" 0644")
			}
			made++
		}
	}
	return ops
}

// ProfileOptions are the inputs of Profile.
type ProfileOptions struct {
	// Lanes are lane specs, as for Create; ext2/3/4 only (the layout is
	// parsed with fsimage). Default ["ext2"].
	Lanes []string
	// Ops are opspec short forms, each run alone from the checkpoint taken
	// after Setup, or the read-side commands "ls [DIR]" and "find [DIR]"
	// (opspec.ParseWalk), each run alone after a cold remount of the
	// checkpoint's state (default DefaultProfileOps, then
	// DefaultProfileReadOps).
	Ops []string
	// Setup runs once, on every lane, before the checkpoint (default
	// DefaultProfileSetup, then ProfileTree(LsFiles, TreeEntries)); a
	// trailing sync is always added.
	Setup []string
	// SetupMayFail lets a Setup op fail on a lane (a finding's trace up to
	// its last op, which may hold ops that fail alike everywhere): its
	// errno is recorded as an event instead of failing the profile.
	SetupMayFail bool
	// LsFiles and TreeEntries size the default setup's tree (default
	// DefaultLsFiles and DefaultTreeEntries, at most 4096 each); with an
	// explicit Setup they must be 0.
	LsFiles, TreeEntries int
	// MemoryMiB is guest RAM in MiB (default 128).
	MemoryMiB int
	// Image is the guest image to boot (session.CreateOptions.Image).
	Image string
}

// LBARange is a run of 512-byte sectors [First, First+Count) of one
// structure; Region is its fsimage kind ("superblock", "inode-table",
// "data", ...). Path, in a profile row's runs, is the directory or file
// whose block (data or indirect) the run is, "/"-rooted, as the image was
// at the checkpoint ("" for blocks no file held then).
type LBARange struct {
	First, Count uint64
	Region       string
	Path         string
}

// ProfileRow is the I/O profile of one op on one lane.
type ProfileRow struct {
	Lane, Op string
	// Bytes is what the op asked to write (a write's size; 0 otherwise).
	Bytes int64
	// SectorsWritten counts 512-byte sectors the device received from the
	// op and the sync after it (a sector written twice counts twice);
	// Written lists the distinct sectors, in runs split at structure
	// boundaries and labelled by fsimage.Locate.
	SectorsWritten int
	Written        []LBARange
	// SectorsRead is the cold read cost of the op's path: after the op and
	// a sync, umount + drop caches + mount, then a stat of the touched path
	// (and a read of it when it is a non-empty regular file), counting the
	// sectors the device served, minus MountBaselineRead (what a bare
	// remount of the checkpoint's state reads). Never negative. For ls and
	// find the window is the cold remount of the checkpoint's state and
	// the walk. Read lists the distinct sectors the window read that the
	// bare remount did not, labelled as Written.
	SectorsRead       int
	MountBaselineRead int
	Read              []LBARange
	// Entries is what an ls or find stat'ed, its start excluded (0 for
	// other ops).
	Entries int64
	// Amplification is SectorsWritten*512 / max(Bytes, 1).
	Amplification float64
	// Errno is the op's errno in the guest (0: it succeeded).
	Errno int32
}

// ProfileSummary is the outcome of a Profile run.
type ProfileSummary struct {
	// Session is the run's session (ended when Profile returns).
	Session string
	// Rows counts the rows reported.
	Rows int
	// Layout is, per lane, the image's regions as fsimage parses them
	// (fsimage.Layout) at the checkpoint.
	Layout map[string][]LBARange
	// Inferred is, per lane, the union of every row's written sectors in
	// runs labelled by fsimage.Locate: the layout as the writes show it.
	Inferred map[string][]LBARange
	// Elapsed is the run's wall time, boot excluded.
	Elapsed time.Duration
}

// profileOp is one parsed op of a profile or corruption run.
type profileOp struct {
	text string
	kind string
	req  *agentv1.Request
}

// parseOps parses short-form ops for field (e.g. "ops"); laneOnly refuses
// global ops (sync, drop-caches, set-clock) and umount/mount.
func parseOps(field string, ops []string, laneOnly bool) ([]profileOp, error) {
	out := make([]profileOp, 0, len(ops))
	for i, s := range ops {
		f := fmt.Sprintf("%s[%d]", field, i)
		r, err := opspec.ParseRequest(s)
		if err != nil {
			return nil, errkind.Invalid(f, "%v", err)
		}
		kind, global, err := session.ValidateOp(r)
		if err != nil {
			var fe *errkind.FieldError
			if errors.As(err, &fe) {
				return nil, errkind.Invalid(f, "%s: %s", fe.Field, fe.Msg)
			}
			return nil, errkind.Invalid(f, "%v", err)
		}
		if laneOnly && (global || kind == "umount" || kind == "mount") {
			return nil, errkind.Invalid(f, "%q: want an operation on a lane's files, not %s", s, kind)
		}
		out = append(out, profileOp{text: strings.TrimSpace(s), kind: kind, req: r})
	}
	return out, nil
}

// validateLanes fills the default lane (ext2) and checks the lanes: every
// lane filesystem is profiled, its layout parsed where a parser reads it
// (ext2/3/4, btrfs) and labelled unparsed elsewhere.
func validateLanes(lanes *[]string, mem *int) ([]guest.LaneSpec, error) {
	if len(*lanes) == 0 {
		*lanes = []string{"ext2"}
	}
	co := session.CreateOptions{Lanes: *lanes, MemoryMiB: *mem}
	specs, err := session.ValidateCreate(&co)
	if err != nil {
		return nil, err
	}
	*mem = co.MemoryMiB
	return specs, nil
}

// walkKind is the kind of a profile's ls and find rows (the agent's Walk).
const walkKind = "walk"

// parseProfileOps parses a profile's ops: ls and find (opspec.ParseWalk)
// and, as parseOps does with laneOnly, ops on a lane's files.
func parseProfileOps(field string, ops []string) ([]profileOp, error) {
	out := make([]profileOp, 0, len(ops))
	for i, s := range ops {
		f := fmt.Sprintf("%s[%d]", field, i)
		w, ok, err := opspec.ParseWalk(s)
		if err != nil {
			return nil, errkind.Invalid(f, "%v", err)
		}
		if !ok {
			op, err := parseOps(field, []string{s}, true)
			if err != nil {
				var fe *errkind.FieldError
				if errors.As(err, &fe) {
					return nil, errkind.Invalid(f, "%s", fe.Msg)
				}
				return nil, err
			}
			out = append(out, op[0])
			continue
		}
		if err := session.CheckPath(f+".path", w.GetPath()); err != nil {
			return nil, err
		}
		out = append(out, profileOp{text: strings.TrimSpace(s), kind: walkKind, req: &agentv1.Request{Op: &agentv1.Request_Walk{Walk: w}}})
	}
	return out, nil
}

func validateProfile(o *ProfileOptions) (ops, setup []profileOp, err error) {
	if _, err := validateLanes(&o.Lanes, &o.MemoryMiB); err != nil {
		return nil, nil, err
	}
	for _, c := range []struct {
		field string
		n     *int
		def   int
	}{{"ls_files", &o.LsFiles, DefaultLsFiles}, {"tree_entries", &o.TreeEntries, DefaultTreeEntries}} {
		switch {
		case *c.n < 0 || *c.n > maxProfileTree:
			return nil, nil, errkind.Invalid(c.field, "%d: want 0..%d", *c.n, maxProfileTree)
		case *c.n != 0 && o.Setup != nil:
			return nil, nil, errkind.Invalid(c.field, "sizes the default setup's tree: with an explicit setup, build the tree there")
		case *c.n == 0 && o.Setup == nil:
			*c.n = c.def
		}
	}
	if len(o.Ops) == 0 {
		o.Ops = append(append([]string(nil), DefaultProfileOps...), DefaultProfileReadOps...)
	}
	if o.Setup == nil {
		o.Setup = append(append([]string(nil), DefaultProfileSetup...), ProfileTree(o.LsFiles, o.TreeEntries)...)
	}
	if ops, err = parseProfileOps("ops", o.Ops); err != nil {
		return nil, nil, err
	}
	if setup, err = parseOps("setup", o.Setup, false); err != nil {
		return nil, nil, err
	}
	return ops, setup, nil
}

// Profile creates a session for o.Lanes, runs o.Setup and a sync on every
// lane, checkpoints, and for each lane and op restores the checkpoint, runs
// the op alone, syncs and counts the sectors the lane's overlay received
// (and which), then the sectors a cold stat/read of the op's path costs
// (and which). An ls or find op runs alone after a cold remount of the
// checkpoint's state, and its row is the sectors the walk read.
// row (optional) gets every row as it is measured. The session is busy
// while the run lasts and ends with it ("profile finished", ...).
//
// An op that fails in the guest is a row with its Errno, not an error. Bad
// options are a FieldError ("ops[2]", "lanes[0]", ...).
func Profile(ctx context.Context, m *session.Manager, o ProfileOptions, row func(ProfileRow)) (*ProfileSummary, error) {
	ops, setup, err := validateProfile(&o)
	if err != nil {
		return nil, err
	}
	run, err := m.Acquire(ctx, session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Image: o.Image}, "profile")
	if err != nil {
		return nil, err
	}
	defer run.Close()
	ctx = run.Context() // ends on Delete and at the daemon's max run duration
	b := newBelow(run)
	b.setupMayFail = o.SetupMayFail
	sum := &ProfileSummary{Session: run.ID(), Layout: map[string][]LBARange{}, Inferred: map[string][]LBARange{}}
	start := time.Now()
	run.Event(ctx, "profile.started", fmt.Sprintf("%d ops, setup %s", len(ops), strings.Join(o.Setup, "; ")), nil)
	runErr := b.profile(ctx, setup, ops, sum, func(r ProfileRow) {
		sum.Rows++
		if row != nil {
			row(r)
		}
	})
	sum.Elapsed = time.Since(start)
	run.Event(context.WithoutCancel(ctx), "profile.finished", fmt.Sprintf("%d rows", sum.Rows), nil)
	return sum, run.Finish(ctx, runErr)
}

// below drives a profile or corruption run's machine through its run's
// locked calls.
type below struct {
	run          *session.Run
	lanes        []string
	specs        []guest.LaneSpec
	root         vmm.CheckpointID
	setupMayFail bool // ProfileOptions.SetupMayFail
}

func newBelow(run *session.Run) *below {
	return &below{run: run, lanes: run.Lanes(), specs: run.Specs()}
}

// setup runs ops (lane ops on every lane), syncs and takes the root checkpoint.
func (b *below) setup(ctx context.Context, ops []profileOp) error {
	for _, op := range ops {
		res, err := b.run.Apply(ctx, op.req)
		if err != nil {
			return fmt.Errorf("setup %q: %w", op.text, err)
		}
		for _, r := range res {
			if r.Errno == 0 {
				continue
			}
			if !b.setupMayFail {
				return fmt.Errorf("setup %q on lane %s: errno %d", op.text, r.Lane, r.Errno)
			}
			b.run.Event(ctx, "profile.setup.errno", fmt.Sprintf("setup %q on lane %s: errno %d (setup may fail)", op.text, r.Lane, r.Errno), nil)
		}
	}
	if err := b.sync(ctx); err != nil {
		return err
	}
	var err error
	b.root, err = b.run.Checkpoint(ctx, "root checkpoint")
	return err
}

func (b *below) restore(ctx context.Context) error {
	return b.run.Restore(ctx, "restore root", b.root)
}

func (b *below) sync(ctx context.Context) error {
	_, err := b.run.CallOK(ctx, "sync", &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
	return err
}

func (b *below) dropCaches(ctx context.Context) error {
	_, err := b.run.CallOK(ctx, "drop caches", &agentv1.Request{Op: &agentv1.Request_DropCaches{DropCaches: &agentv1.DropCaches{Level: 3}}})
	return err
}

func (b *below) umount(ctx context.Context, lane string) error {
	_, err := b.run.CallOK(ctx, "umount "+lane, agent.NewRequest(&agentv1.Umount{Lane: lane}))
	return err
}

// mount remounts lane; a refusal is its response (errno, message).
func (b *below) mount(ctx context.Context, lane string) (*agentv1.Response, error) {
	return b.run.Call(ctx, "mount "+lane, agent.NewRequest(&agentv1.Mount{Lane: lane}))
}

// dev runs f on lane i's overlay with the session locked.
func (b *below) dev(ctx context.Context, i int, what string, f func(d *overlay.Device) error) error {
	return b.run.Disk(ctx, i, what, f)
}

// image parses lane i's resolved overlay. Reads through it count as reads:
// call it outside a measured window.
func (b *below) image(ctx context.Context, i int) (*fsimage.FS, error) {
	var fs *fsimage.FS
	err := b.dev(ctx, i, "parse image", func(d *overlay.Device) error {
		var err error
		fs, err = fsimage.Open(d, d.Size())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lane %s: %w", b.lanes[i], err)
	}
	return fs, nil
}

// counters returns the sectors lane i's overlay served and received since
// its last ResetCounters, and its top layer's write set.
func (b *below) counters(ctx context.Context, i int) (read, written int, set []uint64, err error) {
	err = b.dev(ctx, i, "counters", func(d *overlay.Device) error {
		for _, st := range d.Stats() {
			read += int(st.SectorsRead)
			written += int(st.SectorsWritten)
		}
		set = d.WriteSet()
		return nil
	})
	return read, written, set, err
}

// readSet returns the distinct sectors lane i's overlay served since its
// last ResetCounters (reads are tracked for the whole profile run).
func (b *below) readSet(ctx context.Context, i int) ([]uint64, error) {
	var set []uint64
	err := b.dev(ctx, i, "read set", func(d *overlay.Device) error {
		set = d.ReadSet()
		return nil
	})
	return set, err
}

func (b *below) trackReads(ctx context.Context, i int, on bool) error {
	return b.dev(ctx, i, "track reads", func(d *overlay.Device) error { d.TrackReads(on); return nil })
}

func (b *below) reset(ctx context.Context, i int) error {
	return b.dev(ctx, i, "reset counters", func(d *overlay.Device) error { d.ResetCounters(); return nil })
}

// coldMount syncs, unmounts lane i, drops every cache, zeroes its
// counters and mounts it again; it returns the mount's response.
func (b *below) coldMount(ctx context.Context, i int) (*agentv1.Response, error) {
	lane := b.lanes[i]
	if err := b.sync(ctx); err != nil {
		return nil, err
	}
	if err := b.umount(ctx, lane); err != nil {
		return nil, err
	}
	if err := b.dropCaches(ctx); err != nil {
		return nil, err
	}
	if err := b.reset(ctx, i); err != nil {
		return nil, err
	}
	return b.mount(ctx, lane)
}

func (b *below) profile(ctx context.Context, setup, ops []profileOp, sum *ProfileSummary, emit func(ProfileRow)) error {
	if err := b.setup(ctx, setup); err != nil {
		return err
	}
	for i, lane := range b.lanes {
		if err := b.profileLane(ctx, i, lane, ops, sum, emit); err != nil {
			return err
		}
	}
	return nil
}

// profileLane measures every op on lane i, with its overlay's reads
// tracked (the read set) for the length of it.
func (b *below) profileLane(ctx context.Context, i int, lane string, ops []profileOp, sum *ProfileSummary, emit func(ProfileRow)) (err error) {
	if err := b.trackReads(ctx, i, true); err != nil {
		return err
	}
	defer func() {
		if terr := b.trackReads(context.WithoutCancel(ctx), i, false); terr != nil && err == nil {
			err = terr
		}
	}()
	lay, fs, err := b.layoutOf(ctx, i)
	if err != nil {
		return err
	}
	sum.Layout[lane] = lay.Regions()
	// Which file each block is (ext2/3/4): read now, through the device,
	// with the session locked and outside every measured window.
	lab := labels{lay: lay}
	if fs != nil {
		if err := b.dev(ctx, i, "block owners", func(*overlay.Device) error { lab.own = blockOwners(fs); return nil }); err != nil {
			return err
		}
	}
	// The mount baseline: a bare cold remount of the checkpoint's state.
	if err := b.restore(ctx); err != nil {
		return err
	}
	resp, err := b.coldMount(ctx, i)
	if err != nil {
		return err
	}
	if resp.GetErrno() != 0 {
		return fmt.Errorf("lane %s: baseline mount: errno %d (%s)", lane, resp.GetErrno(), resp.GetError())
	}
	baseline, _, _, err := b.counters(ctx, i)
	if err != nil {
		return err
	}
	baseSet, err := b.readSet(ctx, i)
	if err != nil {
		return err
	}
	written := map[uint64]bool{}
	for _, op := range ops {
		measure := b.profileOp
		if op.kind == walkKind {
			measure = b.profileWalk
		}
		r, readSet, err := measure(ctx, i, op, lab)
		if err != nil {
			return fmt.Errorf("lane %s, op %q: %w", lane, op.text, err)
		}
		r.MountBaselineRead = baseline
		r.SectorsRead = max(r.SectorsRead-baseline, 0)
		r.Read = lab.runs(setMinus(readSet, baseSet))
		for _, w := range r.Written {
			for l := w.First; l < w.First+w.Count; l++ {
				written[l] = true
			}
		}
		emit(r)
	}
	set := make([]uint64, 0, len(written))
	for l := range written {
		set = append(set, l)
	}
	sum.Inferred[lane] = labelRuns(sortedLBAs(set), lay, nil)
	return nil
}

// setMinus returns the sorted a without the sorted b.
func setMinus(a, b []uint64) []uint64 {
	var out []uint64
	for _, l := range a {
		if _, found := slices.BinarySearch(b, l); !found {
			out = append(out, l)
		}
	}
	return out
}

// profileOp measures one op on lane i from the root checkpoint; it also
// returns the sectors the cold read window read.
func (b *below) profileOp(ctx context.Context, i int, op profileOp, lab labels) (ProfileRow, []uint64, error) {
	r, err := b.measureOp(ctx, i, op, lab)
	if err != nil {
		return r, nil, err
	}
	set, err := b.readSet(ctx, i)
	return r, set, err
}

// profileWalk measures an ls or find on lane i: restore the root
// checkpoint, remount it cold, run the walk, count the sectors read (the
// window is the remount and the walk, as the mount baseline is the
// remount alone); then sync, and count what the walk and the sync wrote.
func (b *below) profileWalk(ctx context.Context, i int, op profileOp, lab labels) (ProfileRow, []uint64, error) {
	lane := b.lanes[i]
	r := ProfileRow{Lane: lane, Op: op.text}
	if err := b.restore(ctx); err != nil {
		return r, nil, err
	}
	mresp, err := b.coldMount(ctx, i)
	if err != nil {
		return r, nil, err
	}
	if mresp.GetErrno() != 0 {
		return r, nil, fmt.Errorf("remount: errno %d (%s)", mresp.GetErrno(), mresp.GetError())
	}
	_, w0, set0, err := b.counters(ctx, i)
	if err != nil {
		return r, nil, err
	}
	resp, err := b.run.CallLane(ctx, op.text+" on "+lane, op.req, lane)
	if err != nil {
		return r, nil, err
	}
	r.Errno = resp.GetErrno()
	r.Entries = int64(min(resp.GetWalk().GetEntries(), math.MaxInt64)) // the guest's count: kept in range
	read, _, _, err := b.counters(ctx, i)
	if err != nil {
		return r, nil, err
	}
	readSet, err := b.readSet(ctx, i)
	if err != nil {
		return r, nil, err
	}
	r.SectorsRead = read
	// Writes: the mount and the umount before it write too (the
	// superblock), so count only what came after the mount.
	if err := b.sync(ctx); err != nil {
		return r, nil, err
	}
	_, w1, set1, err := b.counters(ctx, i)
	if err != nil {
		return r, nil, err
	}
	r.SectorsWritten = w1 - w0
	r.Written = lab.runs(setMinus(set1, set0))
	return r, readSet, nil
}

// measureOp measures one op on lane i from the root checkpoint.
func (b *below) measureOp(ctx context.Context, i int, op profileOp, lab labels) (ProfileRow, error) {
	lane := b.lanes[i]
	r := ProfileRow{Lane: lane, Op: op.text}
	if w := op.req.GetWrite(); w != nil {
		r.Bytes = w.GetSize()
		if len(w.GetData()) > 0 {
			r.Bytes = int64(len(w.GetData()))
		}
	}
	if err := b.restore(ctx); err != nil {
		return r, err
	}
	if err := b.reset(ctx, i); err != nil {
		return r, err
	}
	resp, err := b.run.CallLane(ctx, op.kind+" "+lane, op.req, lane)
	if err != nil {
		return r, err
	}
	r.Errno = resp.GetErrno()
	if err := b.sync(ctx); err != nil {
		return r, err
	}
	_, w, set, err := b.counters(ctx, i)
	if err != nil {
		return r, err
	}
	r.SectorsWritten = w
	r.Written = lab.runs(set)
	r.Amplification = float64(r.SectorsWritten*overlay.SectorSize) / float64(max(r.Bytes, 1))

	// Cold read of the touched path.
	mresp, err := b.coldMount(ctx, i)
	if err != nil {
		return r, err
	}
	if mresp.GetErrno() != 0 {
		return r, fmt.Errorf("remount: errno %d (%s)", mresp.GetErrno(), mresp.GetError())
	}
	path := touchedPath(op.req)
	st, err := b.run.Call(ctx, "stat "+lane+"/"+path, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: path}))
	if err != nil {
		return r, err
	}
	if st.GetErrno() == 0 && st.GetStat().GetKind() == agentv1.Kind_KIND_REGULAR && st.GetStat().GetSize() > 0 {
		if _, err := b.readAll(ctx, lane, path); err != nil {
			return r, err
		}
	}
	read, _, _, err := b.counters(ctx, i)
	if err != nil {
		return r, err
	}
	r.SectorsRead = read
	return r, nil
}

// profileReadChunk is the length of one ReadFile call of readAll.
const profileReadChunk = 512 << 10

// maxReadAll bounds the bytes readAll reads of one file: a huge sparse
// file (or one whose size a flipped bit made huge) is read to it, and a
// guest that never reports the end costs at most maxReadAll/profileReadChunk
// calls.
const maxReadAll = 256 << 20

// readAll reads a lane's file to its end or to maxReadAll bytes; it
// returns the first non-zero errno of the reads (0: all read). A read
// that returns more than it was asked for is agent.ErrBadResponse.
func (b *below) readAll(ctx context.Context, lane, path string) (int32, error) {
	what := "read " + lane + "/" + path
	for off := int64(0); off < maxReadAll; off += profileReadChunk {
		resp, err := b.run.Call(ctx, what, agent.NewRequest(&agentv1.ReadFile{Lane: lane, Path: path, Offset: off, Length: profileReadChunk}))
		if err != nil {
			return 0, err
		}
		if resp.GetErrno() != 0 {
			return resp.GetErrno(), nil
		}
		rf := resp.GetReadFile()
		if n := len(rf.GetData()); n > profileReadChunk {
			return 0, fmt.Errorf("%s: %d bytes back, more than the %d asked: %w", what, n, profileReadChunk, agent.ErrBadResponse)
		}
		if rf.GetEof() || len(rf.GetData()) == 0 {
			return 0, nil
		}
	}
	return 0, nil
}

// touchedPath is the path an op leaves behind to look at: the new name of
// a rename or link, else its path (for unlink, the name that is gone).
func touchedPath(r *agentv1.Request) string {
	switch o := r.GetOp().(type) {
	case *agentv1.Request_Rename:
		return o.Rename.GetNewPath()
	case *agentv1.Request_Link:
		return o.Link.GetNewPath()
	}
	msg := r.ProtoReflect()
	fd := msg.WhichOneof(msg.Descriptor().Oneofs().ByName("op"))
	if fd == nil {
		return ""
	}
	sub := msg.Get(fd).Message()
	if p := sub.Descriptor().Fields().ByName("path"); p != nil {
		return sub.Get(p).String()
	}
	return ""
}

func sortedLBAs(s []uint64) []uint64 {
	out := append([]uint64(nil), s...)
	slices.Sort(out)
	return out
}

// labels names the sectors of one lane's image as it was at the
// checkpoint: the region (its layout) and the owning file (ext2/3/4).
type labels struct {
	lay layout
	own owners
}

func (l labels) runs(lbas []uint64) []LBARange { return labelRuns(lbas, l.lay, l.own) }

// labelRuns groups sorted sectors into runs of consecutive sectors that lie
// in one region of lay and belong to one owner (nil owners: none),
// labelled with the region's kind and the owner's path.
func labelRuns(lbas []uint64, lay layout, own owners) []LBARange {
	var out []LBARange
	for _, l := range lbas {
		kind, p := lay.Kind(l), own.of(l)
		if n := len(out); n > 0 && out[n-1].First+out[n-1].Count == l && out[n-1].Region == kind && out[n-1].Path == p {
			out[n-1].Count++
			continue
		}
		out = append(out, LBARange{First: l, Count: 1, Region: kind, Path: p})
	}
	return out
}
