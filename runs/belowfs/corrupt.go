package belowfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/api"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/fsimage/btrfs"
	"github.com/themisfs/themis/fsimage/xfs"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/runs/relay"
	"github.com/themisfs/themis/session"
	"go.uber.org/zap"
)

// Blast-radius classes of a corruption (the paper's Table 11), most
// severe first: the first that applies is the result's Class.
const (
	// ClassKernelCrash: the mount of the flipped image, or a read after
	// it, crashed the guest's kernel (CorruptResult.Kernel holds the
	// report); ClassHung and ClassDied: the guest stopped answering, or
	// died, without a report (package relay). The run goes on in a fresh
	// session.
	ClassKernelCrash    = relay.KernelCrash
	ClassHung           = relay.Hung
	ClassDied           = relay.Died
	ClassFatal          = "fatal"           // the mount fails
	ClassNamespaceLoss  = "namespace-loss"  // paths vanish while the filesystem stays mounted
	ClassDetected       = "detected"        // a filesystem error in the kernel log (EXTn-fs error, BTRFS checksum failure), or EIO/EUCLEAN/EBADMSG reading an affected file
	ClassSilentMetadata = "silent-metadata" // a path's metadata (size, mode, links, ...) changed, no error
	ClassSilentContent  = "silent-content"  // only file content changed, no error
	ClassNone           = "none"            // nothing observable changed
	// ClassNotApplicable marks a sweep target naming a structure the
	// lane's filesystem does not have (an ext2/3/4 superblock field on
	// btrfs): nothing was flipped.
	ClassNotApplicable = api.ClassNotApplicable
)

// Table11Targets are the paper's Table 11 corruptions of the default setup.
var Table11Targets = []string{"data:d/f:0:0", "inode:d/f:i_size", "dirent:d:f:rec_len", "superblock.magic"}

// SweepTargets are one target of every class, over the default setup.
var SweepTargets = []string{
	"data:d/f:0:0", "inode:d/f:i_size", "inode:d/f:i_mode", "inode:d/f:i_links_count",
	"dirent:d:f:rec_len", "superblock.magic", "superblock.inodes_count", "superblock.log_block_size",
	"gd.bg_inode_table", "gd.bg_block_bitmap", "bitmap.block", "bitmap.inode",
}

// DefaultCorruptSetup is the tree the default targets name. d/f has 4 KiB
// so that every lane keeps it in a data block: btrfs stores files up to
// max_inline (2 KiB) inline in a metadata leaf, where a flipped "data"
// bit is a metadata checksum failure instead.
var DefaultCorruptSetup = []string{"mkdir d 0755", "create d/f 0644", "write d/f 0 4096 0x41", "create d/g 0644", "sync"}

// CorruptOptions are the inputs of Corrupt.
type CorruptOptions struct {
	// Lanes are lane specs, as for Create; ext2/3/4 or btrfs. Default
	// ["ext2"].
	Lanes []string
	// Targets name the bit to flip (see ParseTarget). Default
	// Table11Targets, or SweepTargets with Sweep.
	Targets []string
	// Setup runs once on every lane before the checkpoint (default
	// DefaultCorruptSetup); a sync always follows.
	Setup []string
	// Sweep runs SweepTargets (added to Targets) on every lane; on a
	// lane whose filesystem lacks a target's structure (btrfs has no
	// ext2/3/4 superblock field, ...) the result is ClassNotApplicable.
	Sweep bool
	// MemoryMiB is guest RAM in MiB (default 128).
	MemoryMiB int
	// Image is the guest image to boot (session.CreateOptions.Image).
	Image string
}

// CorruptResult is what one flipped bit did to one lane.
type CorruptResult struct {
	Lane, Target string
	// LBA, Offset (byte in the sector) and Bit (0 = least significant) say
	// which bit was flipped.
	LBA    uint64
	Offset int
	Bit    int
	// Region is the kind of the sector (fsimage's, or fsimage/btrfs's on
	// btrfs); Field the structure field. For ClassNotApplicable, Field says
	// why and nothing else is set.
	Region, Field string
	// Mounted is whether the mount after the flip succeeded; MountError
	// is the guest's message when it did not.
	Mounted    bool
	MountError string
	// KernelLog is the kernel log lines the mount and the observation added.
	KernelLog []string
	// Affected are the paths whose leaf (TIME_MODE_NONE) differs from the
	// unflipped counterfactual's, or that vanished or appeared.
	Affected []string
	// ReadErrno is the first errno reading an affected regular file (0: none).
	ReadErrno int32
	// FsckClean is the host checker's verdict on the flipped image (e2fsck
	// -fn; btrfs check --readonly --check-data-csum); FsckSummary its last
	// lines (btrfs: its error lines).
	FsckClean   bool
	FsckSummary string
	// FsckTool is the checker that ran ("" where the lane's filesystem
	// has none: FsckClean is false and means nothing).
	FsckTool string
	// Class is one of the Class* constants.
	Class string
	// Kernel is the kernel's report of a ClassKernelCrash result (its
	// text is KernelLog too).
	Kernel *kreport.Report
}

// CorruptSummary is the outcome of a Corrupt run.
type CorruptSummary struct {
	// Session is the run's session (ended when Corrupt returns).
	Session string
	// Results counts results; ByClass by class.
	Results int
	ByClass map[string]int
	// Elapsed is the run's wall time, boot excluded.
	Elapsed time.Duration
	// Sessions are every session the run used, Session first; Deaths
	// the guests lost (a flip that lost one went on in a fresh session).
	Sessions []string
	Deaths   int
}

type corruptTarget struct {
	text string
	t    Target
	// implicit is set for the targets the run chose (SweepTargets,
	// Table11Targets by default): on a lane without the structure they are
	// ClassNotApplicable instead of an error.
	implicit bool
}

// validateCorruptLanes fills the default lane and checks every lane's host
// checker is installed where its filesystem has one (hostfsck.For; vfat,
// udf and overlay have none, and their results say so).
func validateCorruptLanes(o *CorruptOptions) ([]guest.LaneSpec, error) {
	if len(o.Lanes) == 0 {
		o.Lanes = []string{"ext2"}
	}
	co := session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB}
	specs, err := session.ValidateCreate(&co)
	if err != nil {
		return nil, err
	}
	o.MemoryMiB = co.MemoryMiB
	for i, sp := range specs {
		tool, err := hostfsck.For(sp.FS)
		if err != nil {
			continue // no checker: the results say so
		}
		if err := tool.Installed(); err != nil {
			return nil, errkind.Invalid(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
	}
	return specs, nil
}

func validateCorrupt(o *CorruptOptions) ([]corruptTarget, []profileOp, error) {
	specs, err := validateCorruptLanes(o)
	if err != nil {
		return nil, nil, err
	}
	given, implicit := len(o.Targets), true
	switch {
	case o.Sweep:
		o.Targets = append(append([]string(nil), o.Targets...), SweepTargets...)
	case len(o.Targets) == 0:
		o.Targets = append([]string(nil), Table11Targets...)
	default:
		implicit = false
	}
	ts := make([]corruptTarget, len(o.Targets))
	for i, s := range o.Targets {
		t, err := ParseTarget(s)
		if err != nil {
			return nil, nil, errkind.Invalid(fmt.Sprintf("targets[%d]", i), "%v", err)
		}
		ts[i] = corruptTarget{text: strings.TrimSpace(s), t: t, implicit: implicit && i >= given}
		if ts[i].implicit {
			continue
		}
		// A target asked for by name must exist on every lane.
		for _, sp := range specs {
			if err := t.AppliesTo(sp.FS); err != nil {
				return nil, nil, errkind.Invalid(fmt.Sprintf("targets[%d]", i), "%s on lane %s (%s): %v", ts[i].text, sp.Name, sp.FS, err)
			}
		}
	}
	if o.Setup == nil {
		o.Setup = append([]string(nil), DefaultCorruptSetup...)
	}
	setup, err := parseOps("setup", o.Setup, false)
	if err != nil {
		return nil, nil, err
	}
	return ts, setup, nil
}

// Corrupt creates a session for o.Lanes, runs o.Setup and a sync,
// checkpoints, and for every lane and target: restores the checkpoint,
// stops the lane's world (sync, umount, drop caches: the guest keeps no
// cached copy), flips the target's bit in the overlay's top layer, mounts
// again and observes (mount result, kernel log, fingerprint against the
// unflipped counterfactual taken the same way, reads of the affected
// files, the host fsck), then restores the checkpoint and checks the lane's
// disk hash and fingerprint equal the checkpoint's: a corruption never
// outlives its branch. res (optional) gets every result.
//
// Targets are resolved on the live image after Setup, with fsimage on
// ext2/3/4 lanes and fsimage/btrfs on btrfs lanes; one that names nothing
// there is a FieldError ("targets[i]"), and so is a target given by name
// that names a structure some lane's filesystem does not have. The
// targets the run chose itself (Sweep, the default) are ClassNotApplicable
// results there instead.
func Corrupt(ctx context.Context, m *session.Manager, o CorruptOptions, res func(CorruptResult)) (_ *CorruptSummary, err error) {
	targets, setup, err := validateCorrupt(&o)
	if err != nil {
		return nil, err
	}
	ch, ctx, err := relay.Start(ctx, m, session.CreateOptions{Lanes: o.Lanes, MemoryMiB: o.MemoryMiB, Image: o.Image}, "corrupt")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ch.Close()) }()
	run := ch.Run()
	c := &corrupter{below: newBelow(run), chain: ch.Chain, scratch: filepath.Join(ch.Dir, "lane.img")}
	sum := &CorruptSummary{Session: run.ID(), ByClass: map[string]int{}}
	start := time.Now()
	run.Event(ctx, "corrupt.started", fmt.Sprintf("%d targets", len(targets)), nil)
	runErr := c.corrupt(ctx, setup, targets, func(r CorruptResult) {
		sum.Results++
		sum.ByClass[r.Class]++
		if res != nil {
			res(r)
		}
	})
	sum.Elapsed, sum.Sessions, sum.Deaths = time.Since(start), ch.Sessions(), ch.Deaths()
	run.Event(context.WithoutCancel(ctx), "corrupt.finished", fmt.Sprintf("%d results, %v, %d guests lost", sum.Results, sum.ByClass, sum.Deaths), nil)
	return sum, ch.Finish(runErr)
}

type corrupter struct {
	*below
	chain    *relay.Chain
	scratch  string // scratch file for the host fsck
	kmsgSeq  uint64 // last kernel log record seen
	kmsgSeen bool   // kmsgSeq is a record seen (the first may be 0)
}

// observation is one lane's state after a (possibly flipped) cold mount.
type observation struct {
	mounted    bool
	mountError string
	leaves     map[string]*agentv1.Entry // nil when the walk failed
}

func (c *corrupter) corrupt(ctx context.Context, setup []profileOp, targets []corruptTarget, emit func(CorruptResult)) error {
	if err := c.begin(ctx, setup); err != nil {
		return err
	}
	for i := range c.lanes {
		if err := c.corruptLane(ctx, setup, i, targets, emit); err != nil {
			return err
		}
	}
	return nil
}

// begin runs the setup (and its sync and root checkpoint) and reads the
// kernel log so far.
func (c *corrupter) begin(ctx context.Context, setup []profileOp) error {
	if err := c.setup(ctx, setup); err != nil {
		return err
	}
	_, err := c.kmsg(ctx)
	return err
}

// laneFlips is a lane made ready for its flips: each target's flip (or
// why it does not apply), the root's disk hash and fingerprint, and the
// unflipped counterfactual's observation.
type laneFlips struct {
	flips    []flip
	na       []string
	rootHash [32]byte
	rootRoot []byte
	cf       *observation
}

// corruptLane flips each target on lane i, each on a branch of the root. A
// flip that loses the guest (its mount crashes the kernel, ...) is a
// result of its death's class, and the next flips go on in a fresh
// session, the setup run again and the lane made ready again.
func (c *corrupter) corruptLane(ctx context.Context, setup []profileOp, i int, targets []corruptTarget, emit func(CorruptResult)) error {
	lane := c.lanes[i]
	var ln *laneFlips
	for j, t := range targets {
		if ln == nil {
			if err := c.live(ctx, setup); err != nil {
				return err
			}
			var err error
			if ln, err = c.ready(ctx, i, targets); err != nil {
				return err
			}
		}
		if ln.na[j] != "" {
			emit(CorruptResult{Lane: lane, Target: t.text, Field: ln.na[j], Class: ClassNotApplicable})
			continue
		}
		r, err := c.one(ctx, i, t.text, ln.flips[j], ln.cf)
		if d, dead := relay.Of(ctx, err); dead {
			c.chain.Lost(d)
			c.run.Log().Warn("a flip lost the guest: the run goes on in a fresh session", zap.String("lane", lane), zap.String("target", t.text), zap.String("death", d.Summary()))
			emit(deathResult(r, d))
			ln = nil
			continue
		}
		if err != nil {
			return fmt.Errorf("lane %s, target %s: %w", lane, t.text, err)
		}
		if err := c.branchGone(ctx, i, ln, t.text); err != nil {
			return err
		}
		emit(r)
	}
	return nil
}

// deathResult is r, whose flip lost the guest (d), of the death's class.
func deathResult(r CorruptResult, d *relay.Death) CorruptResult {
	out := CorruptResult{Lane: r.Lane, Target: r.Target, LBA: r.LBA, Offset: r.Offset, Bit: r.Bit, Region: r.Region, Field: r.Field,
		Class: d.Verdict(), Kernel: d.Report, KernelLog: []string{d.Summary()}}
	if d.Report != nil && d.Report.Text != "" {
		out.KernelLog = strings.Split(d.Report.Text, "\n")
	}
	return out
}

// live makes the corrupter's session one whose guest lives: after a
// death, a fresh one (relay.Chain.Live) with the setup run again.
func (c *corrupter) live(ctx context.Context, setup []profileOp) error {
	run, replaced, err := c.chain.Live()
	if err != nil || !replaced {
		return err
	}
	c.below, c.kmsgSeq, c.kmsgSeen = newBelow(run), 0, false
	if err := c.begin(ctx, setup); err != nil {
		return fmt.Errorf("the setup again in session %s, after the guest died: %w", run.ID(), err)
	}
	return nil
}

// ready resolves each target's flip on lane i (or says why it does not
// apply), keeps the root's state and observes the unflipped
// counterfactual.
func (c *corrupter) ready(ctx context.Context, i int, targets []corruptTarget) (*laneFlips, error) {
	lane, fsName := c.lanes[i], c.specs[i].FS
	resolveOn, err := c.resolver(ctx, i)
	if err != nil {
		return nil, err
	}
	ln := &laneFlips{flips: make([]flip, len(targets)), na: make([]string, len(targets))}
	for j, t := range targets {
		if err := t.t.AppliesTo(fsName); err != nil {
			ln.na[j] = fmt.Sprintf("%s has no ext2/3/4 %s", fsName, extOnly[t.t.Kind])
			if fsName != "btrfs" {
				ln.na[j] = fmt.Sprintf("%s: %v", fsName, err)
			}
			continue
		}
		err := c.dev(ctx, i, "resolve target", func(d *overlay.Device) error {
			var err error
			ln.flips[j], err = resolveOn(t.t, d)
			return err
		})
		if err != nil {
			return nil, errkind.Invalid(fmt.Sprintf("targets[%d]", j), "lane %s: %v", lane, err)
		}
	}
	if ln.rootHash, ln.rootRoot, err = c.state(ctx, i); err != nil {
		return nil, err
	}
	if err := c.restore(ctx); err != nil {
		return nil, err
	}
	if ln.cf, err = c.observe(ctx, i, nil); err != nil {
		return nil, fmt.Errorf("lane %s: counterfactual: %w", lane, err)
	}
	if !ln.cf.mounted || ln.cf.leaves == nil {
		return nil, fmt.Errorf("lane %s: counterfactual remount failed: %s", lane, ln.cf.mountError)
	}
	return ln, nil
}

// branchGone restores the root after target's flip on lane i and checks
// that its disk and fingerprint are the root's again.
func (c *corrupter) branchGone(ctx context.Context, i int, ln *laneFlips, target string) error {
	if err := c.restore(ctx); err != nil {
		return err
	}
	h, root, err := c.state(ctx, i)
	if err != nil {
		return err
	}
	if h != ln.rootHash || !bytes.Equal(root, ln.rootRoot) {
		return fmt.Errorf("lane %s, target %s: the corruption outlived its branch (disk hash %x, checkpoint %x)", c.lanes[i], target, h[:8], ln.rootHash[:8])
	}
	return nil
}

func (c *corrupter) resolver(ctx context.Context, i int) (func(Target, *overlay.Device) (flip, error), error) {
	switch fsName := c.specs[i].FS; {
	case fsName == "xfs":
		// Resolved on the stopped image only: after a sync xfs keeps
		// metadata in its log, written in place at umount.
		return func(t Target, _ *overlay.Device) (flip, error) {
			return flip{Region: RegionUnparsed, Field: "(resolved at the flip)", again: func(d *overlay.Device) (flip, error) {
				fs, err := xfs.Open(d, d.Size())
				if err != nil {
					return flip{}, err
				}
				return resolveXfs(t, fs, d.Size())
			}}, nil
		}, nil
	case fsName != "btrfs" && !strings.HasPrefix(fsName, "ext"):
		return func(t Target, d *overlay.Device) (flip, error) { return resolveRaw(t, d.Size()) }, nil
	}
	if c.specs[i].FS != "btrfs" {
		fs, err := c.image(ctx, i)
		if err != nil {
			return nil, err
		}
		return func(t Target, d *overlay.Device) (flip, error) { return resolve(t, fs, d, d.Size()) }, nil
	}
	var fs *btrfs.FS
	err := c.dev(ctx, i, "parse image", func(d *overlay.Device) error {
		var err error
		fs, err = btrfs.Open(d, d.Size())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lane %s: %w", c.lanes[i], err)
	}
	return func(t Target, d *overlay.Device) (flip, error) {
		f, err := resolveBtrfs(t, fs, d.Size())
		f.again = func(d *overlay.Device) (flip, error) {
			fs, err := btrfs.Open(d, d.Size())
			if err != nil {
				return flip{}, err
			}
			return resolveBtrfs(t, fs, d.Size())
		}
		return f, err
	}, nil
}

// state is lane i's disk hash and fingerprint root (TIME_MODE_NONE). The
// hash is of the image the last checkpoint or restore left (the overlay
// below the top layer it pushed): what the guest writes after it, such as
// xfs's log worker under a loaded host, lands above and would make a hash
// of the live disk depend on when it is taken.
func (c *corrupter) state(ctx context.Context, i int) ([32]byte, []byte, error) {
	var h [32]byte
	err := c.dev(ctx, i, "disk hash", func(d *overlay.Device) error {
		v, err := d.ViewAt(d.Depth() - 1)
		if err == nil {
			h, err = v.Hash()
		}
		return err
	})
	if err != nil {
		return h, nil, err
	}
	resp, err := c.run.CallOK(ctx, "fingerprint "+c.lanes[i], agent.NewRequest(&agentv1.Fingerprint{Lane: c.lanes[i], TimeMode: agentv1.TimeMode_TIME_MODE_NONE}))
	if err != nil {
		return h, nil, err
	}
	return h, resp.GetFingerprint().GetRoot(), nil
}

// kmsg returns the kernel log lines after the last seen: at most
// maxKmsgCalls calls, a response that brings no line newer than the last
// seen ends the drain, and what is kept is bounded (kmsgKeep).
func (c *corrupter) kmsg(ctx context.Context) ([]string, error) {
	var keep kmsgKeep
	for range maxKmsgCalls {
		resp, err := c.run.CallOK(ctx, "kmsg", &agentv1.Request{Op: &agentv1.Request_Kmsg{Kmsg: &agentv1.Kmsg{AfterSeq: c.kmsgSeq}}})
		if err != nil {
			return nil, err
		}
		fresh := false
		for _, l := range resp.GetKmsg().GetLines() {
			if c.kmsgSeen && l.GetSeq() <= c.kmsgSeq {
				continue // not after the last seen: the agent repeats itself
			}
			c.kmsgSeq, c.kmsgSeen, fresh = l.GetSeq(), true, true
			keep.add(l.GetText())
		}
		if !fresh {
			return keep.lines(), nil
		}
	}
	keep.more = true
	return keep.lines(), nil
}
