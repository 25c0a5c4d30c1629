package oracle

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// LostFound is the name mkfs.ext2/3/4 gives the directory it creates at the
// root of a new filesystem.
const LostFound = "lost+found"

// NilfsSketch is the name of the regular file mkfs.nilfs2 makes at the root
// of a nilfs2 filesystem (its "sketch file", inode 10, whose contents each
// checkpoint records).
const NilfsSketch = ".nilfs"

// Policy is a named canonicalization applied to a walk before it is folded:
// the differences between filesystems that a comparison is told to ignore.
// Every rule is spelled out as a field and the policy has a name that
// reports and findings quote, so nothing is ever dropped silently. The zero
// Policy (named "" and meaning [Exact]) changes nothing.
type Policy struct {
	// Name identifies the policy in flags, reports and the ledger.
	Name string
	// NonRegularSizeZero sets size to 0 for every entry that is not a
	// regular file: directory sizes are block-allocation artifacts that
	// differ between filesystems (ext2 1024, btrfs the sum of name lengths),
	// and symlink sizes follow from the target, which is compared anyway.
	NonRegularSizeZero bool
	// SkipRootLostFound leaves the entry "lost+found" directly under the lane
	// root, and everything below it, out of the walk. Entries named
	// lost+found anywhere else are kept.
	SkipRootLostFound bool
	// AdjustRootNlink lowers the root's link count by one when
	// SkipRootLostFound removed a lost+found directory (its ".." link), so
	// that a lane with lost+found and one without agree.
	AdjustRootNlink bool
	// SkipRootSketch leaves the regular file NilfsSketch directly under the
	// lane root out of the walk: mkfs.nilfs2 makes it, the other
	// filesystems have none. A file of that name elsewhere, or one of
	// another kind, is kept.
	SkipRootSketch bool
	// IgnoreRootNlink sets the root's link count to 0. An overlay lane's
	// root is a merged directory (the upper directory over the lower
	// layer's root), and overlayfs reports nlink 1 for merged directories
	// instead of counting their subdirectories; a plain filesystem's root
	// counts them. Directories below the root keep their link counts.
	IgnoreRootNlink bool
	// IgnoreDirNlink sets every directory's link count to 0. Over a
	// populated lower layer every directory in both layers that an op
	// touches (copying it up) becomes a merged directory, and overlayfs
	// reports nlink 1 for each ([MergedDirNlink]); a plain filesystem
	// counts subdirectories. Non-directories keep their link counts.
	IgnoreDirNlink bool
	// IgnoreOwner sets every entry's uid and gid to 0: vfat and exfat
	// store no owner (every file has the mount's).
	IgnoreOwner bool
	// IgnoreMode sets every entry's permission bits to 0: vfat and exfat
	// store a read-only bit, the mode is the mount's masks.
	IgnoreMode bool
}

// Exact is the identity policy: the walk is folded as it is.
var Exact = Policy{Name: "exact"}

// MetisParity mirrors the abstract state of Metis (FAST'24): size 0 for
// non-regular files, /lost+found skipped, the root's nlink lowered by one
// for it. Use it when lanes differ in having lost+found (ext2 against btrfs)
// or in directory sizes.
var MetisParity = Policy{
	Name:               "metis",
	NonRegularSizeZero: true,
	SkipRootLostFound:  true,
	AdjustRootNlink:    true,
}

// MetisOverlay is MetisParity with the root's nlink left out: it compares
// an overlay lane (whose root overlayfs reports with nlink 1) with a plain
// filesystem past the root, where MetisParity stops at a root that differs.
var MetisOverlay = Policy{
	Name:               "overlay",
	NonRegularSizeZero: true,
	SkipRootLostFound:  true,
	AdjustRootNlink:    true,
	IgnoreRootNlink:    true,
}

// MetisOverlayDirs is MetisParity with every directory's nlink left out:
// it compares an overlay lane over a populated lower layer with a plain
// filesystem past the merged directories, where MetisOverlay stops at the
// first one.
var MetisOverlayDirs = Policy{
	Name:               "overlay-dirs",
	NonRegularSizeZero: true,
	SkipRootLostFound:  true,
	AdjustRootNlink:    true,
	IgnoreRootNlink:    true,
	IgnoreDirNlink:     true,
}

// Policies lists the named policies, for flags and help text.
var Policies = []Policy{Exact, MetisParity, MetisOverlay, MetisOverlayDirs}

// PolicyByName returns the policy called name ("" means exact).
func PolicyByName(name string) (Policy, error) {
	if name == "" {
		return Exact, nil
	}
	for _, p := range Policies {
		if p.Name == name {
			return p, nil
		}
	}
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = p.Name
	}
	return Policy{}, fmt.Errorf("oracle: unknown canonicalization policy %q (want one of %s)", name, strings.Join(names, ", "))
}

// String describes the policy's rules, for reports.
func (p Policy) String() string {
	var rules []string
	if p.NonRegularSizeZero {
		rules = append(rules, "size 0 for non-regular files")
	}
	if p.SkipRootLostFound {
		rules = append(rules, "/lost+found skipped")
	}
	if p.AdjustRootNlink {
		rules = append(rules, "root nlink -1 for a skipped lost+found")
	}
	if p.SkipRootSketch {
		rules = append(rules, "/"+NilfsSketch+" skipped")
	}
	if p.IgnoreRootNlink {
		rules = append(rules, "root nlink 0")
	}
	if p.IgnoreDirNlink {
		rules = append(rules, "directory nlink 0")
	}
	if p.IgnoreOwner {
		rules = append(rules, "uid and gid 0")
	}
	if p.IgnoreMode {
		rules = append(rules, "mode 0")
	}
	name := p.Name
	if name == "" {
		name = Exact.Name
	}
	if len(rules) == 0 {
		return name + " (no canonicalization)"
	}
	return name + " (" + strings.Join(rules, "; ") + ")"
}

// underLostFound reports whether path is /lost+found or inside it.
func underLostFound(path string) bool {
	return path == LostFound || strings.HasPrefix(path, LostFound+"/")
}

// Canonicalize returns entries rewritten by p, as a new slice. It never
// modifies its input: entries p changes are copies, entries it leaves alone
// are shared with the input, and the order of the input is kept.
func Canonicalize(entries []*agentv1.Entry, p Policy) []*agentv1.Entry {
	skipped := false
	if p.SkipRootLostFound {
		for _, e := range entries {
			if e.GetPath() == LostFound && e.GetKind() == agentv1.Kind_KIND_DIRECTORY {
				skipped = true
				break
			}
		}
	}
	out := make([]*agentv1.Entry, 0, len(entries))
	for _, e := range entries {
		if p.SkipRootLostFound && underLostFound(e.GetPath()) {
			continue
		}
		if p.SkipRootSketch && e.GetPath() == NilfsSketch && e.GetKind() == agentv1.Kind_KIND_REGULAR {
			continue
		}
		var c *agentv1.Entry
		edit := func() *agentv1.Entry {
			if c == nil {
				c = proto.Clone(e).(*agentv1.Entry)
			}
			return c
		}
		if p.NonRegularSizeZero && e.GetKind() != agentv1.Kind_KIND_REGULAR && e.GetSize() != 0 {
			edit().Size = 0
		}
		if p.AdjustRootNlink && skipped && e.GetPath() == "" && e.GetKind() == agentv1.Kind_KIND_DIRECTORY && e.GetNlink() > 0 {
			edit().Nlink--
		}
		if p.IgnoreRootNlink && e.GetPath() == "" && e.GetNlink() != 0 {
			edit().Nlink = 0
		}
		if p.IgnoreDirNlink && e.GetKind() == agentv1.Kind_KIND_DIRECTORY && e.GetNlink() != 0 {
			edit().Nlink = 0
		}
		if p.IgnoreOwner && (e.GetUid() != 0 || e.GetGid() != 0) {
			edit().Uid, edit().Gid = 0, 0
		}
		if p.IgnoreMode && e.GetMode() != 0 {
			edit().Mode = 0
		}
		if c != nil {
			out = append(out, c)
		} else {
			out = append(out, e)
		}
	}
	return out
}

// FoldPolicy is Fold over Canonicalize(entries, p).
func FoldPolicy(entries []*agentv1.Entry, mode TimeMode, p Policy) [32]byte {
	return Fold(Canonicalize(entries, p), mode)
}
