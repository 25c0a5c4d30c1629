package exploration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/overlay"
)

// remountCheck is the "state unchanged by umount+mount" self-reference of a
// single-lane run.
func (x *system) remountCheck(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
	t0 := time.Now()
	defer since(&x.t.check, t0)
	lane := x.lanes[0]
	before, err := x.laneLeaves(ctx, lane)
	if err != nil {
		return nil, err
	}
	x.forget()
	for _, req := range []*agentv1.Request{
		{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: lane}}},
		{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane}}},
	} {
		what := strings.TrimPrefix(fmt.Sprintf("%T", req.GetOp()), "*agentv1.Request_")
		resp, err := x.call(ctx, strings.ToLower(what)+" "+lane, req)
		if err != nil {
			return nil, err
		}
		if resp.GetErrno() != 0 {
			return &explore.Finding{Kind: KindRemount, Field: strings.ToLower(what),
				Detail: fmt.Sprintf("%s of lane %s failed: errno %d (%s)", strings.ToLower(what), lane, resp.GetErrno(), resp.GetError())}, nil
		}
	}
	after, err := x.laneLeaves(ctx, lane)
	if err != nil {
		return nil, err
	}
	return remountDiff(lane, before, after, x.mode), nil
}

// remountDiff is the remount self-reference's finding of lane, whose
// leaves were before and are after an umount+mount (nil: unchanged).
func remountDiff(lane string, before, after []*agentv1.Entry, mode agentv1.TimeMode) *explore.Finding {
	if bytes.Equal(oracle.Root(before, mode), oracle.Root(after, mode)) {
		return nil
	}
	path, ok := oracle.FirstDiff(before, after, mode)
	if !ok {
		return nil
	}
	field, va, vb := explore.FieldDiff(oracle.Find(before, path), oracle.Find(after, path), mode)
	return &explore.Finding{Kind: KindRemount, Path: path, Field: field,
		Detail: fmt.Sprintf("lane %s changed across umount+mount at %s: %s %s before, %s after", lane, shownPath(path), field, va, vb)}
}

// unreadableCheck is the check every run has: a lane whose filesystem
// refuses to read an entry of its own tree (the walk's read_errno: EIO,
// EUCLEAN, EBADMSG, ...) after a sequence of ordinary ops is a finding,
// with or without another lane to compare with.
func (x *system) unreadableCheck(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
	t0 := time.Now()
	defer since(&x.t.check, t0)
	for _, lane := range x.lanes {
		leaves, err := x.laneLeaves(ctx, lane)
		if err != nil {
			return nil, err
		}
		if f := unreadableIn(lane, leaves); f != nil {
			return f, nil
		}
	}
	return nil, nil
}

// unreadableIn is the unreadable check's finding of lane's leaves (nil:
// every entry read), or else the seek-answer check's (nil: lseek answered
// as lseek(2) allows wherever the walk sought).
func unreadableIn(lane string, leaves []*agentv1.Entry) *explore.Finding {
	for _, e := range leaves {
		if n := e.GetReadErrno(); n != 0 {
			return &explore.Finding{Kind: KindUnreadable, Path: e.GetPath(), Field: "read_errno",
				Detail: fmt.Sprintf("lane %s: the filesystem refuses to read %s: %s", lane, shownPath(e.GetPath()), oracle.ErrnoText(n))}
		}
	}
	for _, e := range leaves {
		if s := e.GetSeekError(); s != "" {
			return &explore.Finding{Kind: KindSeekAnswer, Path: e.GetPath(), Field: "seek",
				Detail: fmt.Sprintf("lane %s: the filesystem answers lseek on %s with an offset lseek(2) rules out: %s", lane, shownPath(e.GetPath()), s)}
		}
	}
	return nil
}

// sizeCheck is the other check every run has: a regular file larger than
// its lane's family allows (family.Family.MaxFile: FAT's 4 GiB, UDF's
// 4 TiB, ...) is a finding; the far ops (explore.FarLengths) write and
// truncate around those limits.
func (x *system) sizeCheck(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
	t0 := time.Now()
	defer since(&x.t.check, t0)
	for _, lane := range x.lanes {
		limit, ok := x.maxFile[lane]
		if !ok {
			continue
		}
		leaves, err := x.laneLeaves(ctx, lane)
		if err != nil {
			return nil, err
		}
		if f := oversizedIn(lane, leaves, limit); f != nil {
			return f, nil
		}
	}
	return nil, nil
}

// oversizedIn is the size check's finding of lane's leaves: a regular
// file larger than limit bytes (nil: none).
func oversizedIn(lane string, leaves []*agentv1.Entry, limit int64) *explore.Finding {
	for _, e := range leaves {
		if e.GetKind() == agentv1.Kind_KIND_REGULAR && e.GetSize() > limit {
			return &explore.Finding{Kind: KindSizeLimit, Path: e.GetPath(), Field: "size",
				Detail: fmt.Sprintf("lane %s: %s has %d bytes, past its filesystem's largest file, %d bytes", lane, shownPath(e.GetPath()), e.GetSize(), limit)}
		}
	}
	return nil
}

// shownPath is a lane path as findings show it ("/" for the root).
func shownPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// layerSeen is the lower ⊕ upper reference's record of one overlay lane.
type layerSeen struct {
	states map[string]bool // merged roots checked
	counts LayerCounts
}

// layersCheck returns the lower ⊕ upper self-reference of an overlay lane:
// the merged view (the lane's walk) must equal oracle.Merge of its lower
// layer and its upper layer seen from below, as walked; both sides are
// canonicalized under the run's policy and compared under its time mode — every field a leaf has,
// the nlink of merged directories included (overlayfs reports 1 for them,
// and Merge says so). It costs no walk of its own: the merged view and the
// view from below are the state's fingerprint walks, and the lower layer is
// walked once per run.
func (x *system) layersCheck(lane string) explore.Check {
	return func(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
		t0 := time.Now()
		defer since(&x.t.check, t0)
		below, err := x.belowLeaves(ctx, lane)
		if err != nil {
			return nil, err
		}
		got, err := x.laneLeaves(ctx, lane) // the merged view, canonicalized
		if err != nil {
			return nil, err
		}
		lower, err := x.lowerLeaves(ctx, lane)
		if err != nil {
			return nil, err
		}
		x.countLayers(lane, oracle.Root(got, x.mode), below)
		want := oracle.WithoutSymlinkAtime(oracle.Canonicalize(oracle.Merge(lower, below), x.policy))
		got = oracle.WithoutSymlinkAtime(got)
		path, ok := oracle.FirstDiff(want, got, x.mode)
		if !ok {
			return nil, nil
		}
		field, vw, vg := explore.FieldDiff(oracle.Find(want, path), oracle.Find(got, path), x.mode)
		shown := path
		if shown == "" {
			shown = "/"
		}
		return &explore.Finding{Kind: KindLayers, Path: path, Field: field,
			Detail: fmt.Sprintf("lane %s: the merged view differs from lower ⊕ upper seen from below at %s: %s %s in lower ⊕ upper, %s merged (policy %s)", lane, shown, field, vw, vg, x.policy.Name)}, nil
	}
}

// countLayers records a checked state of an overlay lane (once per merged
// root) and the markers its upper layer holds.
func (x *system) countLayers(lane string, root []byte, below []*agentv1.Entry) {
	seen := x.layers[lane]
	if seen == nil {
		seen = &layerSeen{states: make(map[string]bool)}
		x.layers[lane] = seen
	}
	if seen.states[string(root)] {
		return
	}
	seen.states[string(root)] = true
	seen.counts.Checked++
	var wh, op bool
	for _, e := range below {
		switch oracle.ParseSymbolic(e).Marker {
		case oracle.MarkerWhiteout:
			wh = true
		case oracle.MarkerOpaque:
			op = true
		}
	}
	if wh {
		seen.counts.Whiteouts++
	}
	if op {
		seen.counts.Opaque++
	}
}

// quiesce makes the single lane's image consistent for the host checker
// as its family says (family.Quiesce): sync, or umount and mount again
// (xfs: sync leaves metadata in the log, which xfs_repair -n cannot
// replay). A remount leaves the abstract state as it was.
func (x *system) quiesce(ctx context.Context) error {
	fam, err := family.Of(x.run.Specs()[0].Layer().FS)
	if err != nil {
		return fmt.Errorf("fsck: %w", err)
	}
	reqs := []*agentv1.Request{{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}}
	if fam.Quiesce == family.Remount {
		lane := x.lanes[0]
		x.forget()
		reqs = []*agentv1.Request{
			{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: lane}}},
			{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane}}},
		}
	}
	for _, req := range reqs {
		what := strings.ToLower(strings.TrimPrefix(fmt.Sprintf("%T", req.GetOp()), "*agentv1.Request_"))
		if _, err := x.callOK(ctx, what+" before fsck", req); err != nil {
			return err
		}
	}
	return nil
}

// fsckCheck is the "host fsck clean" self-reference of a single ext*,
// overlay or btrfs lane (fsckFor): sync in the guest, write the lane's
// resolved overlay image to a scratch file and check it on the host. The
// image is of a mounted filesystem after sync (xfs: after umount+mount,
// quiesce); ext2 writes its superblock and group counters on sync, and
// btrfs commits its transaction, so it is clean unless the filesystem is
// not.
func (x *system) fsckCheck(ctx context.Context, _ explore.System, _ []*agentv1.Request) (*explore.Finding, error) {
	t0 := time.Now()
	defer since(&x.t.check, t0)
	if err := x.quiesce(ctx); err != nil {
		return nil, err
	}
	if err := x.run.Disk(ctx, 0, "fsck image", func(d *overlay.Device) error {
		return scratch.WriteImage(x.fsckImage, d, d.Size())
	}); err != nil {
		return nil, checked(err)
	}
	tool, err := hostfsck.For(x.run.Specs()[0].Layer().FS)
	if err != nil {
		return nil, fmt.Errorf("fsck: %w", err)
	}
	verdict, out, err := tool.Run(ctx, x.fsckImage)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fsck: %w", err)
	case verdict == hostfsck.Clean:
		return nil, nil
	case verdict == hostfsck.Broken:
		return nil, fmt.Errorf("fsck: %s could not check lane %s's image: %s", tool.Name, x.lanes[0], hostfsck.Truncate(out, hostfsck.MaxOutput))
	}
	return &explore.Finding{Kind: KindFsck, Field: "fsck",
		Detail: fmt.Sprintf("%s on lane %s's image reports errors: %s", tool.Name, x.lanes[0], hostfsck.Truncate(out, hostfsck.MaxOutput))}, nil
}
