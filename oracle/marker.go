package oracle

import (
	"strconv"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Marker is the dialect-free meaning of an overlay upper-layer entry.
//
// Two dialects record deletions in an upper layer: kernel overlayfs writes a
// character device 0:0 named after the victim and marks an opaque directory
// with the xattr overlay.opaque="y"; AUFS writes a regular file
// ".wh.<victim>" and a regular file ".wh..wh..opq" inside an opaque
// directory. They cannot be confused (a device node against a regular file
// with a reserved prefix), so classifying needs no dialect flag.
//
// Classification must run before any dispatch on file type: a kernel
// whiteout is a device node, and a walk that skips device nodes first would
// drop every deletion without a word.
type Marker uint8

const (
	// MarkerNone is an ordinary entry.
	MarkerNone Marker = iota
	// MarkerWhiteout says Target is deleted in the merged view.
	MarkerWhiteout
	// MarkerOpaque says the directory Target hides everything below it in
	// the lower layers.
	MarkerOpaque
)

func (m Marker) String() string {
	switch m {
	case MarkerNone:
		return "none"
	case MarkerWhiteout:
		return "whiteout"
	case MarkerOpaque:
		return "opaque"
	}
	return "marker(" + strconv.Itoa(int(m)) + ")"
}

// Dialect says which overlay convention spelled a marker. It is for
// diagnostics only: symbolic entries never record it.
type Dialect uint8

const (
	// DialectNone: not a marker.
	DialectNone Dialect = iota
	// DialectKernel: Linux overlayfs (char device 0:0, overlay.opaque xattr,
	// or a regular file carrying overlay.whiteout).
	DialectKernel
	// DialectAUFS: ".wh.<name>" and ".wh..wh..opq" regular files.
	DialectAUFS
)

func (d Dialect) String() string {
	switch d {
	case DialectKernel:
		return "kernel"
	case DialectAUFS:
		return "aufs"
	}
	return "none"
}

// AUFS marker spellings.
const (
	AUFSWhiteoutPrefix = ".wh."
	AUFSOpaque         = ".wh..wh..opq"
	// aufsMetaPrefix starts AUFS's other reserved names (.wh..wh.plnk,
	// .wh..wh.aufs); they are not markers and are kept as ordinary entries.
	aufsMetaPrefix = ".wh..wh."
)

// Kernel overlayfs xattrs, in the trusted namespace or, on a mount with
// userxattr, the user namespace.
var (
	opaqueXattrs   = []string{"trusted.overlay.opaque", "user.overlay.opaque"}
	whiteoutXattrs = []string{"trusted.overlay.whiteout", "user.overlay.whiteout"}
	metacopyXattrs = []string{"trusted.overlay.metacopy", "user.overlay.metacopy"}
)

// HasMetacopy reports whether an upper-layer entry's xattrs mark it as a
// metacopy (overlayfs with metacopy=on): the entry holds the file's
// metadata while its data is still in a lower layer. Read from below, such
// an upper layer records an empty file, so a walk must refuse it rather
// than fold it.
func HasMetacopy(xattrs map[string][]byte) bool {
	for _, x := range metacopyXattrs {
		if _, ok := xattrs[x]; ok {
			return true
		}
	}
	return false
}

// Class is the result of [Classify].
type Class struct {
	Marker Marker
	// Target is the path (relative to the layer root, like Entry.Path) the
	// marker applies to: the deleted path for a whiteout, the directory for
	// an opaque marker. Empty for MarkerNone (and for an opaque layer root).
	Target string
	// Dialect is the convention that spelled the marker.
	Dialect Dialect
}

func split(path string) (dir, name string) {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Classify says what an upper-layer entry means. rdev is the entry's device
// number (st_rdev; [agentv1.Entry] has none), only looked at for character
// devices; xattrs are the entry's extended attributes (nil when not read).
//
//   - a character device with rdev 0 (0:0): kernel whiteout of its own path;
//   - a regular file carrying overlay.whiteout: kernel whiteout of its own
//     path (the xattr form of Linux 6.7+);
//   - a directory with overlay.opaque = "y": kernel opaque directory;
//   - a regular file ".wh..wh..opq": AUFS opaque marker for its directory;
//   - a regular file ".wh.<name>": AUFS whiteout of <name> beside it;
//   - anything else, including other device nodes and other ".wh..wh."
//     names: MarkerNone.
func Classify(e *agentv1.Entry, rdev uint64, xattrs map[string][]byte) Class {
	path := e.GetPath()
	dir, name := split(path)
	switch e.GetKind() {
	case agentv1.Kind_KIND_CHAR_DEVICE:
		if rdev == 0 {
			return Class{Marker: MarkerWhiteout, Target: path, Dialect: DialectKernel}
		}
	case agentv1.Kind_KIND_DIRECTORY:
		for _, x := range opaqueXattrs {
			if string(xattrs[x]) == "y" {
				return Class{Marker: MarkerOpaque, Target: path, Dialect: DialectKernel}
			}
		}
	case agentv1.Kind_KIND_REGULAR:
		switch {
		case name == AUFSOpaque:
			return Class{Marker: MarkerOpaque, Target: dir, Dialect: DialectAUFS}
		case strings.HasPrefix(name, aufsMetaPrefix):
			// reserved AUFS name, not a marker
		case strings.HasPrefix(name, AUFSWhiteoutPrefix) && len(name) > len(AUFSWhiteoutPrefix):
			return Class{Marker: MarkerWhiteout, Target: join(dir, name[len(AUFSWhiteoutPrefix):]), Dialect: DialectAUFS}
		}
		for _, x := range whiteoutXattrs {
			if _, ok := xattrs[x]; ok {
				return Class{Marker: MarkerWhiteout, Target: path, Dialect: DialectKernel}
			}
		}
	}
	return Class{}
}

// Symbolic-entry path suffixes. A NUL byte cannot occur in a file name, so a
// symbolic entry never collides with a real one, and it sorts directly after
// the path it applies to.
const (
	whiteoutSuffix = "\x00whiteout"
	opaqueSuffix   = "\x00opaque"
)

// SymbolicEntry returns the dialect-free entry that stands for a marker in a
// fingerprint: path Target+"\x00whiteout" or Target+"\x00opaque", kind
// unspecified, every other field zero. It returns nil for MarkerNone. The
// same marker spelled in either dialect gives the same entry.
func SymbolicEntry(c Class) *agentv1.Entry {
	switch c.Marker {
	case MarkerWhiteout:
		return &agentv1.Entry{Path: c.Target + whiteoutSuffix}
	case MarkerOpaque:
		return &agentv1.Entry{Path: c.Target + opaqueSuffix}
	}
	return nil
}

// ParseSymbolic is the inverse of SymbolicEntry: it reports the marker a
// symbolic entry stands for, or MarkerNone for an ordinary entry.
func ParseSymbolic(e *agentv1.Entry) Class {
	p := e.GetPath()
	switch {
	case strings.HasSuffix(p, whiteoutSuffix):
		return Class{Marker: MarkerWhiteout, Target: strings.TrimSuffix(p, whiteoutSuffix)}
	case strings.HasSuffix(p, opaqueSuffix):
		return Class{Marker: MarkerOpaque, Target: strings.TrimSuffix(p, opaqueSuffix)}
	}
	return Class{}
}

// UpperEntry is one entry of an upper-layer walk with what classification
// needs beyond [agentv1.Entry].
type UpperEntry struct {
	Entry *agentv1.Entry
	// Rdev is st_rdev (only meaningful for device nodes).
	Rdev uint64
	// Xattrs holds the entry's extended attributes, at least the
	// overlay.* ones; nil when none were read.
	Xattrs map[string][]byte
}

// NormalizeUpper turns an upper-layer walk into dialect-free entries,
// classifying each entry before looking at its type: whiteouts (kernel or
// AUFS) and AUFS opaque files become their [SymbolicEntry]; a kernel opaque
// directory stays as a directory (its overlay.* xattrs are not part of an
// entry) and gains the symbolic opaque entry. Every other entry, device
// nodes included, is kept as it is: nothing is dropped. The input is not
// modified; returned entries that are not symbolic are shared with it.
func NormalizeUpper(in []UpperEntry) []*agentv1.Entry {
	out := make([]*agentv1.Entry, 0, len(in))
	for _, u := range in {
		c := Classify(u.Entry, u.Rdev, u.Xattrs)
		switch {
		case c.Marker == MarkerNone:
			out = append(out, u.Entry)
		case c.Marker == MarkerOpaque && c.Dialect == DialectKernel:
			out = append(out, u.Entry, SymbolicEntry(c))
		default:
			out = append(out, SymbolicEntry(c))
		}
	}
	return out
}
