package belowfs

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/overlay"
)

// observe stops lane i's world, applies f (nil: none), mounts and walks.
func (c *corrupter) observe(ctx context.Context, i int, f *flip) (*observation, error) {
	lane := c.lanes[i]
	if err := c.sync(ctx); err != nil {
		return nil, err
	}
	if err := c.umount(ctx, lane); err != nil {
		return nil, err
	}
	if err := c.dropCaches(ctx); err != nil {
		return nil, err
	}
	if f != nil {
		err := c.dev(ctx, i, "flip", func(d *overlay.Device) error {
			if f.again != nil {
				nf, err := f.again(d)
				if err != nil {
					return fmt.Errorf("resolve on the stopped image: %w", err)
				}
				*f = nf
			}
			var sec [overlay.SectorSize]byte
			off := int64(f.LBA) * overlay.SectorSize
			if _, err := d.ReadAt(sec[:], off); err != nil {
				return err
			}
			sec[f.Offset] ^= 1 << f.Bit
			_, err := d.WriteAt(sec[:], off)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if _, err := c.kmsg(ctx); err != nil { // lines before the mount are not the flip's
		return nil, err
	}
	resp, err := c.mount(ctx, lane)
	if err != nil {
		return nil, err
	}
	o := &observation{mounted: resp.GetErrno() == 0}
	if !o.mounted {
		o.mountError = fmt.Sprintf("errno %d: %s", resp.GetErrno(), resp.GetError())
		return o, nil
	}
	fp, err := c.run.Call(ctx, "fingerprint "+lane, agent.NewRequest(&agentv1.Fingerprint{Lane: lane, TimeMode: agentv1.TimeMode_TIME_MODE_NONE, Leaves: true}))
	if err != nil {
		return nil, err
	}
	// A walk with entries the filesystem refused to read is compared as a
	// failed walk: every counterfactual path is stat'ed and read (compare).
	if fp.GetErrno() == 0 && fp.GetError() == "" && fp.GetFingerprint().GetUnreadable() == 0 {
		o.leaves = map[string]*agentv1.Entry{}
		for _, e := range fp.GetFingerprint().GetLeaves() {
			o.leaves[e.GetPath()] = e
		}
	}
	return o, nil
}

// fsErrorLine matches the kernel's reports of damage it found: ext2/3/4
// errors, and btrfs errors and checksum failures (a data block's "csum
// failed", a tree block's "checksum verify failed", "bad tree block").
var fsErrorLine = regexp.MustCompile(`EXT[234]-fs (error|\(.*\): error)|BTRFS (error|critical) \(device |BTRFS warning \(device [^)]*\): (csum failed|checksum verify failed|bad tree block)`)

// Errnos that mean the filesystem detected the damage: EIO, EUCLEAN
// (EFSCORRUPTED) and EBADMSG (EFSBADCRC, a metadata checksum mismatch).
const (
	errnoEIO     = 5
	errnoEBADMSG = 74
	errnoEUCLEAN = 117
)

// one runs target f on lane i from the checkpoint.
func (c *corrupter) one(ctx context.Context, i int, text string, f flip, cf *observation) (CorruptResult, error) {
	lane := c.lanes[i]
	r := CorruptResult{Lane: lane, Target: text, LBA: f.LBA, Offset: f.Offset, Bit: f.Bit, Region: f.Region, Field: f.Field}
	if err := c.restore(ctx); err != nil {
		return r, err
	}
	o, err := c.observe(ctx, i, &f)
	if err != nil {
		return r, err
	}
	r.LBA, r.Offset, r.Bit, r.Region, r.Field = f.LBA, f.Offset, f.Bit, f.Region, f.Field // as flipped
	r.Mounted, r.MountError = o.mounted, o.mountError
	var vanished, meta, content bool
	if o.mounted {
		if vanished, meta, content, err = c.compare(ctx, lane, cf, o, &r); err != nil {
			return r, err
		}
	}
	if r.KernelLog, err = c.kmsg(ctx); err != nil {
		return r, err
	}
	if r.FsckClean, r.FsckSummary, err = c.fsck(ctx, i, o.mounted); err != nil {
		return r, err
	}
	if tool, err := hostfsck.For(c.specs[i].FS); err == nil {
		r.FsckTool = tool.Name
	}
	detected := r.ReadErrno == errnoEIO || r.ReadErrno == errnoEUCLEAN || r.ReadErrno == errnoEBADMSG
	for _, l := range r.KernelLog {
		detected = detected || fsErrorLine.MatchString(l)
	}
	switch {
	case !r.Mounted:
		r.Class = ClassFatal
	case vanished && r.ReadErrno == errnoEBADMSG:
		// The object is refused on a checksum mismatch (EFSBADCRC): the
		// filesystem caught the flip. Names lost to a rejected directory
		// block (EUCLEAN on lookup) stay namespace-loss, as in the paper.
		r.Class = ClassDetected
	case vanished:
		r.Class = ClassNamespaceLoss
	case detected:
		r.Class = ClassDetected
	case meta:
		r.Class = ClassSilentMetadata
	case content:
		r.Class = ClassSilentContent
	default:
		r.Class = ClassNone
	}
	return r, nil
}

// compare fills r.Affected and r.ReadErrno from the flipped observation
// against the counterfactual. When the flipped walk failed (a directory
// the kernel refuses to read, a file whose data fails its checksum), every
// counterfactual path is stat'ed and every regular file read.
func (c *corrupter) compare(ctx context.Context, lane string, cf, o *observation, r *CorruptResult) (vanished, meta, content bool, err error) {
	mode := agentv1.TimeMode_TIME_MODE_NONE
	got := o.leaves
	if got == nil {
		got = map[string]*agentv1.Entry{}
		for p := range cf.leaves {
			st, err := c.run.Call(ctx, "stat "+lane+"/"+p, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: p}))
			if err != nil {
				return false, false, false, err
			}
			if st.GetErrno() != 0 {
				continue
			}
			s := st.GetStat()
			e := &agentv1.Entry{Path: p, Kind: s.GetKind(), Mode: s.GetMode(), Uid: s.GetUid(), Gid: s.GetGid(), Nlink: s.GetNlink(), Size: s.GetSize(),
				ContentHash: cf.leaves[p].GetContentHash()}
			if s.GetKind() == agentv1.Kind_KIND_REGULAR {
				// The walk may have failed on this file's content (EIO on
				// a data checksum): a file that cannot be read is affected.
				errno, err := c.readAll(ctx, lane, p)
				if err != nil {
					return false, false, false, err
				}
				if errno != 0 {
					e.ContentHash = nil
				}
			}
			got[p] = e
		}
	}
	paths := map[string]bool{}
	for p := range cf.leaves {
		paths[p] = true
	}
	for p := range got {
		paths[p] = true
	}
	for _, p := range sortedStrings(keys(paths)) {
		a, b := cf.leaves[p], got[p]
		switch {
		case a == nil || b == nil:
			vanished = vanished || b == nil
			meta = true
		case oracle.LeafHash(a, mode) == oracle.LeafHash(b, mode):
			continue
		case a.GetKind() != b.GetKind() || a.GetMode() != b.GetMode() || a.GetUid() != b.GetUid() || a.GetGid() != b.GetGid() ||
			a.GetNlink() != b.GetNlink() || a.GetSize() != b.GetSize() || a.GetSymlinkTarget() != b.GetSymlinkTarget():
			meta = true
		default:
			content = true
		}
		r.Affected = append(r.Affected, p)
		if b != nil && b.GetKind() == agentv1.Kind_KIND_REGULAR && r.ReadErrno == 0 {
			if r.ReadErrno, err = c.readAll(ctx, lane, p); err != nil {
				return false, false, false, err
			}
		}
		if b == nil && a != nil && r.ReadErrno == 0 {
			// Gone from the walk: is the name gone, or does the
			// filesystem refuse it (EBADMSG on a checksum, EUCLEAN)?
			st, err := c.run.Call(ctx, "stat "+lane+"/"+p, agent.NewRequest(&agentv1.Stat{Lane: lane, Path: p}))
			if err != nil {
				return false, false, false, err
			}
			if e := st.GetErrno(); e != 0 && e != int32(syscall.ENOENT) {
				r.ReadErrno = e
			}
		}
	}
	return vanished, meta, content, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// maxFsckSummary caps FsckSummary.
const maxFsckSummary = 1024

// fsck runs the lane's host checker (hostfsck.For) on lane i's resolved image
// (quiesced first when mounted: synced, or for xfs unmounted).
func (c *corrupter) fsck(ctx context.Context, i int, mounted bool) (bool, string, error) {
	tool, err := hostfsck.For(c.specs[i].FS)
	if err != nil {
		return false, "no host checker: " + err.Error(), nil
	}
	if mounted {
		// As the family says (xfs: sync leaves metadata in the log,
		// which xfs_repair -n cannot replay; umount writes it in place).
		// The branch is restored after, mounted.
		quiesce := c.sync
		if fam, err := family.Of(c.specs[i].FS); err == nil && fam.Quiesce == family.Remount {
			quiesce = func(ctx context.Context) error { return c.umount(ctx, c.lanes[i]) }
		}
		if err := quiesce(ctx); err != nil {
			return false, "", err
		}
	}
	if err := c.dev(ctx, i, "fsck image", func(d *overlay.Device) error { return scratch.WriteImage(c.scratch, d, d.Size()) }); err != nil {
		return false, "", err
	}
	verdict, out, err := tool.Run(ctx, c.scratch)
	if err != nil {
		return false, "", fmt.Errorf("fsck: %w", err)
	}
	if c.specs[i].FS == "btrfs" {
		return verdict == hostfsck.Clean, btrfsCheckSummary(out), nil
	}
	if verdict == hostfsck.Clean {
		return true, lastLines(out, 2), nil
	}
	return false, lastLines(out, 8), nil
}

// btrfsCheckLine is a line of btrfs check's output worth quoting: its
// errors and its verdict, not the progress and byte counts.
var btrfsCheckLine = regexp.MustCompile(`(?i)error|mismatch|corrupt|cannot|bad |no error found`)

// btrfsCheckSummary is btrfs check's error lines and verdict, the last 8.
func btrfsCheckSummary(out []byte) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && btrfsCheckLine.MatchString(l) {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return lastLines(out, 2)
	}
	return lastLines([]byte(strings.Join(keep, "\n")), 8)
}

// lastLines is the last n non-empty lines of out, capped.
func lastLines(out []byte, n int) string {
	var ls []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	ls = ls[max(len(ls)-n, 0):]
	s := strings.Join(ls, "; ")
	if len(s) > maxFsckSummary {
		s = s[:maxFsckSummary] + "..."
	}
	return s
}
