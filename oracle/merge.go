package oracle

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// MergedDirNlink is the link count overlayfs reports for a merged
// directory (an upper directory over a lower one): it does not count their
// subdirectories ("nlink=1 seems to pacify 'find' and other utilities",
// fs/overlayfs/inode.c, ovl_getattr).
const MergedDirNlink = 1

// Merge returns the view an overlay mount shows over one lower layer:
// lower ⊕ upper. lower is a plain walk of the lower layer (its root has
// path ""); upper is the upper directory seen from below, dialect-free:
// [NormalizeUpper]'s entries, the symbolic "<path>\x00whiteout" and
// "<path>\x00opaque" entries included. The rules are overlayfs's lookup
// with one lower layer, redirect_dir=off, metacopy=off and index=off (the
// options an overlay lane is mounted with):
//
//   - every ordinary upper entry is in the view, with the upper entry's
//     fields;
//   - a lower entry is in the view when no upper entry and no whiteout has
//     its path and its parent directory reaches down: the root does unless
//     the upper root is opaque; any other directory does when it is a
//     directory in the lower layer, is in the view, its parent reaches
//     down, it has no whiteout and no opaque marker, and the upper layer
//     has nothing at its path or a directory. So a whiteout deletes a lower
//     entry and everything below it, an opaque directory hides the lower
//     directory's children, and an upper non-directory replaces a lower
//     directory with all its children;
//   - a directory that is in both layers and reaches down (the root among
//     them) is a merged directory: it has the upper directory's fields but
//     nlink [MergedDirNlink], as overlayfs reports it. Every other entry
//     keeps its own nlink: a lower-only directory the lower one's, an upper
//     directory over nothing (or opaque) the upper one's.
//
// A whiteout beside an upper entry of the same path (which the kernel
// never writes) hides the lower entry; the upper one is in the view.
// Nothing else is left out or rewritten: canonicalize the result and the
// merged walk with the same [Policy] before comparing them. The result is
// sorted by path; entries are shared with the inputs except the merged
// directories' (copies). The inputs are not modified.
func Merge(lower, upper []*agentv1.Entry) []*agentv1.Entry {
	up := make(map[string]*agentv1.Entry, len(upper))
	whiteout := make(map[string]bool)
	opaque := make(map[string]bool)
	for _, e := range upper {
		switch c := ParseSymbolic(e); c.Marker {
		case MarkerWhiteout:
			whiteout[c.Target] = true
		case MarkerOpaque:
			opaque[c.Target] = true
		default:
			up[e.GetPath()] = e
		}
	}
	low := make(map[string]*agentv1.Entry, len(lower))
	for _, e := range lower {
		low[e.GetPath()] = e
	}
	isDir := func(e *agentv1.Entry) bool { return e != nil && e.GetKind() == agentv1.Kind_KIND_DIRECTORY }

	// reaches memoizes whether lookups below a directory path consult the
	// lower layer.
	reachMemo := make(map[string]bool)
	var reaches func(dir string) bool
	reaches = func(dir string) bool {
		if r, ok := reachMemo[dir]; ok {
			return r
		}
		var r bool
		if dir == "" {
			r = isDir(low[""]) && !opaque[""]
		} else {
			parent, _ := split(dir)
			u := up[dir]
			r = isDir(low[dir]) && reaches(parent) && !whiteout[dir] && !opaque[dir] && (u == nil || isDir(u))
		}
		reachMemo[dir] = r
		return r
	}

	out := make([]*agentv1.Entry, 0, len(up)+len(low))
	for p, e := range up {
		if isDir(e) && reaches(p) && e.GetNlink() != MergedDirNlink {
			c := proto.Clone(e).(*agentv1.Entry)
			c.Nlink = MergedDirNlink
			e = c
		}
		out = append(out, e)
	}
	for p, e := range low {
		if p == "" || up[p] != nil || whiteout[p] {
			continue
		}
		if parent, _ := split(p); reaches(parent) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *agentv1.Entry) int { return strings.Compare(a.GetPath(), b.GetPath()) })
	return out
}

// WithoutSymlinkAtime returns entries with the atime of every symlink
// cleared (copies; the input is unchanged). The layers reference compares
// under it: readlink(2) moves a link's atime under relatime and cannot be
// told not to, and through overlayfs the merged walk's readlink and the
// walk of the upper layer from below see the move at different times, so
// the two views would disagree on it by observation alone.
func WithoutSymlinkAtime(entries []*agentv1.Entry) []*agentv1.Entry {
	out := make([]*agentv1.Entry, len(entries))
	for i, e := range entries {
		if e.GetKind() == agentv1.Kind_KIND_SYMLINK && e.GetAtime() != nil {
			e = proto.Clone(e).(*agentv1.Entry)
			e.Atime = nil
		}
		out[i] = e
	}
	return out
}
