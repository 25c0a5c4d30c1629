package family

import (
	"fmt"
	"slices"
	"strings"

	"github.com/themisfs/themis/oracle"
)

// Field is a part of the abstract state that carries no meaning on a
// filesystem, so a comparison with another leaves it out.
type Field string

// Fields a family can declare.
const (
	// LostFound: mkfs makes /lost+found (ext*): it is skipped, and the
	// root's nlink lowered for it.
	LostFound Field = "lost+found"
	// Sketch: mkfs.nilfs2 makes the regular file /.nilfs (nilfs2's
	// sketch file): it is skipped.
	Sketch Field = "/.nilfs"
	// DirSize: a directory's size is an allocation artifact (every
	// family); symlink sizes follow from the target, compared anyway.
	DirSize Field = "directory size"
	// RootNlink: the root's nlink does not count its subdirectories.
	RootNlink Field = "root nlink"
	// DirNlink: no directory's nlink counts its subdirectories.
	DirNlink Field = "directory nlink"
	// Owner: uid and gid are the mount's, not the file's.
	Owner Field = "owner"
	// Mode: permission bits are the mount's masks, not the file's.
	Mode Field = "mode bits"
)

// Effect is what a run does with an op a filesystem does not support.
type Effect string

// Effects.
const (
	// Excluded: the op would change the state on the other lanes, so a
	// differential run with this filesystem does not generate it.
	Excluded Effect = "excluded"
	// Tolerated: the op's effect is not in the state or a declared field
	// covers it; its errno here is not a finding.
	Tolerated Effect = "tolerated"
)

// OpRule is an op (explore op kind) a filesystem does not support.
type OpRule struct {
	Op     string
	Errno  int32 // what the filesystem gives (or may give) for it
	Effect Effect
	Why    string
}

// Quiesce is how the host checker's image of a mounted lane is made
// consistent.
type Quiesce string

// Quiesce methods.
const (
	// Sync: sync writes everything (ext2's counters, btrfs's transaction).
	Sync Quiesce = "sync"
	// Remount: umount and mount again; xfs keeps metadata in its log
	// after sync, which xfs_repair -n cannot replay.
	Remount Quiesce = "remount"
)

// Family is one row of the table.
type Family struct {
	Name    string   // "ext", "btrfs", ...
	FS      []string // lane filesystems (guest.LaneSpec.FS)
	Module  string   // the guest kernel's module ("" built in)
	Mkfs    string   // the host tool making base images
	Fsck    string   // the host checker, "" where Debian has none
	Package string   // Debian packages of both
	Quiesce Quiesce
	Fields  []FieldRule
	Ops     []OpRule
	Time    string // the clock rule, in words (clock.RuleFor is the code)
	// MaxFile is the largest file size its driver allows (s_maxbytes)
	// where that does not depend on the lane's geometry (block size),
	// 0 where it does or is past every far length (explore.FarLengths):
	// a regular file larger than it is a finding (every explore run).
	MaxFile int64
}

// FieldRule is a declared field with its reason.
type FieldRule struct {
	Field Field
	Why   string
	// Seeded is true when the rule applies only over a populated lower
	// layer (an overlay lane with seed).
	Seeded bool
}

// Lane is what the table needs of a lane.
type Lane struct {
	Name   string
	FS     string
	Seeded bool // seed= is set (an overlay lane's lower layer is populated)
}

// Of returns the family of lane filesystem fs.
func Of(fs string) (*Family, error) {
	for i := range Table {
		if slices.Contains(Table[i].FS, fs) {
			return &Table[i], nil
		}
	}
	return nil, fmt.Errorf("family: no family for filesystem %q", fs)
}

// declares reports whether the family declares field for lane l.
func (f *Family) declares(field Field, l Lane) bool {
	for _, r := range f.Fields {
		if r.Field == field && (!r.Seeded || l.Seeded) {
			return true
		}
	}
	return false
}

// names lists families, for messages.
func names(fs []*Family) string {
	var out []string
	for _, f := range fs {
		if !slices.Contains(out, f.Name) {
			out = append(out, f.Name)
		}
	}
	return strings.Join(out, ", ")
}

// fieldPolicy sets the oracle.Policy rule of field.
func fieldPolicy(p *oracle.Policy, field Field) {
	switch field {
	case LostFound:
		p.SkipRootLostFound, p.AdjustRootNlink = true, true
	case Sketch:
		p.SkipRootSketch = true
	case DirSize:
		p.NonRegularSizeZero = true
	case RootNlink:
		p.IgnoreRootNlink = true
	case DirNlink:
		p.IgnoreDirNlink = true
	case Owner:
		p.IgnoreOwner = true
	case Mode:
		p.IgnoreMode = true
	}
}
