package guest

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// LaneSpec is one lane's filesystem: a filesystem type and its mkfs
// settings. The textual form is "<fs>[:<key>=<value>]...", e.g. "ext2",
// "ext4:inode_size=128", "ext4:size=64", "vfat", "ext2:name=old:inode_size=256",
// "ext2:seed=1", "overlay", "overlay:seed=1", "btrfs", "btrfs:mixed=0:size=128",
// "xfs", "xfs:bigtime=0", "exfat", "udf".
//
// Keys: inode_size (ext*: bytes per inode, a power of two 128..4096),
// size (MiB; for overlay the size of each layer), block_size (ext*: 1024,
// 2048 or 4096; default mke2fs's choice for the size), fat (vfat: 12, 16 or
// 32; default mkfs.fat's choice), mixed (btrfs: 1, the default, mixes data
// and metadata in one block group, mkfs.btrfs --mixed, for images from
// 16 MiB; 0 separates them, DUP metadata, from 109 MiB), bigtime (xfs:
// 1, the default, stores times to 2486; 0 to 2038), seed (ext* and
// overlay: 0, the default, leaves the filesystem empty; 1 to [MaxSeed] puts
// [SeedTree]'s files and directories into the base image, for an overlay
// lane into its lower layer) and name (the lane's name, 1 to 64 of
// A-Z a-z 0-9 . _ + -; default the spec string itself, which must then be
// 1 to 64 of those and ':' '='). Keys and values take no spaces: every
// field has its grammar, and the name reaches shell scripts and C sources
// (exported reproducers) and paths.
//
// An overlay lane is kernel overlayfs over two disks of its own, an ext2
// lower layer (mounted read-only, made from [LaneSpec.Lower]'s base image)
// and an ext2 upper layer (always empty, [LaneSpec.Layer]'s); see
// docs/explore.md.
type LaneSpec struct {
	Name      string            // lane name, used as /lanes/<Name> in the guest
	FS        string            // "ext2", "ext3", "ext4", "vfat", "btrfs", "xfs", "exfat", "udf", "f2fs", "minix", "nilfs2" or "overlay"
	InodeSize int               // bytes per inode (ext* only; 0 for the others)
	SizeMiB   int               // image size in MiB (overlay: of each layer)
	Options   map[string]string // further settings without a field: block_size, fat, mixed (btrfs: always set), bigtime (xfs: always set), seed (when not 0)
}

// Filesystem defaults. ext2 uses 128-byte inodes, as in the paper (and so
// keeps the Y2038 limit); ext3/ext4 use mke2fs's default of 256.
var fsDefaults = map[string]struct {
	inodeSize, sizeMiB int
	keys               []string // accepted option keys besides name and size
}{
	"ext2": {128, 8, []string{"inode_size", "block_size", "seed"}},
	"ext3": {256, 8, []string{"inode_size", "block_size", "seed"}},
	"ext4": {256, 8, []string{"inode_size", "block_size", "seed"}},
	"vfat": {0, 16, []string{"fat"}},
	// btrfs: mixed block groups by default (mkfs.btrfs --mixed), which
	// take 16 MiB and up; 32 MiB leaves room for the runs' files.
	"btrfs": {0, 32, []string{"mixed"}},
	// xfs: v5 (CRCs), mkfs.xfs's smallest, 300 MiB (64 MiB allocated, most
	// of it the log; sparse under the overlay); bigtime 1 (the default)
	// stores times to 2486, 0 to 2038.
	"xfs":   {0, xfsMinMiB, []string{"bigtime"}},
	"exfat": {0, 16, nil},
	// udf: UDF 2.01 for hard disks (mkudffs --media-type=hd), 512-byte
	// blocks.
	"udf": {0, 16, nil},
	// f2fs and minix (v3) need the generic kernel flavour (Flavor).
	// mkfs.f2fs makes nothing under 64 MiB here.
	"f2fs":  {0, 64, nil},
	"minix": {0, 8, nil},
	// nilfs2: mkfs.nilfs2's default 8 MiB segments need more than 128 MiB.
	"nilfs2": {0, 256, nil},
	// overlay: two ext2 layers of size MiB each (see Layer and Lower);
	// seed goes to the lower layer.
	"overlay": {0, 8, []string{"seed"}},
}

// Overlay lanes' layers.
const (
	// OverlayFS is the LaneSpec.FS of an overlay lane.
	OverlayFS = "overlay"
	// overlayLayerFS and overlayLayerInodeSize make each layer: ext2 with
	// 128-byte inodes, like an "ext2" lane.
	overlayLayerFS        = "ext2"
	overlayLayerInodeSize = 128
)

// IsOverlay reports whether the lane is an overlay lane (two disks: lower
// and upper layer).
func (l LaneSpec) IsOverlay() bool { return l.FS == OverlayFS }

// Layer returns the spec of an overlay lane's upper layer (an empty ext2
// of the lane's size, same name; its filesystem is also the lower
// layer's), and l itself for any other lane. baseimage.Make makes an overlay
// lane's image from it.
func (l LaneSpec) Layer() LaneSpec {
	if !l.IsOverlay() {
		return l
	}
	return LaneSpec{Name: l.Name, FS: overlayLayerFS, InodeSize: overlayLayerInodeSize, SizeMiB: l.SizeMiB}
}

// genericFS are the lane filesystems only the generic kernel flavour has.
var genericFS = []string{"f2fs", "minix", "nilfs2"}

// Flavor is the kernel flavour the lane needs: FlavorGeneric for the
// filesystems only the generic kernel carries, else FlavorCloud.
func (l LaneSpec) Flavor() string {
	if slices.Contains(genericFS, l.FS) {
		return FlavorGeneric
	}
	return FlavorCloud
}

// FlavorOf is the kernel flavour a guest with these lanes boots: generic
// when a lane needs it, else cloud.
func FlavorOf(specs []LaneSpec) string {
	for _, sp := range specs {
		if sp.Flavor() == FlavorGeneric {
			return FlavorGeneric
		}
	}
	return FlavorCloud
}

// FlavorName is a flavour's canonical name ("" is FlavorCloud).
func FlavorName(f string) string {
	if f == "" {
		return FlavorCloud
	}
	return f
}

// MountOptions are the guest's mount options for the lane ("" the
// defaults): "nouuid" for xfs, whose base images all carry the pinned UUID
// (xfs refuses a second filesystem with a mounted one's UUID).
func (l LaneSpec) MountOptions() string {
	if l.FS == "xfs" {
		return "nouuid"
	}
	return ""
}

// Lower returns the spec of an overlay lane's lower layer: Layer with the
// lane's seed, so that "overlay:seed=1" has the lower layer of an
// "ext2:seed=1" lane's image. For any other lane it returns l.
func (l LaneSpec) Lower() LaneSpec {
	if !l.IsOverlay() {
		return l
	}
	lower := l.Layer()
	if n := l.Seed(); n != 0 {
		lower.setOption("seed", strconv.Itoa(n))
	}
	return lower
}

// The smallest btrfs images mkfs.btrfs 6.x makes, in MiB: with mixed block
// groups, and without (114294784 bytes).
const (
	btrfsMinMixedMiB = 16
	btrfsMinMiB      = 109
	// xfsMinMiB is mkfs.xfs 6.x's smallest filesystem ("must be larger
	// than 300MB").
	xfsMinMiB = 300
)

// MaxSizeMiB bounds size= (1 TiB): base images are sparse but are hashed and
// diffed whole.
const MaxSizeMiB = 1 << 20

// ParseLaneSpec parses one lane spec; see LaneSpec for the syntax.
func ParseLaneSpec(s string) (LaneSpec, error) {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ":")
	fsName := strings.ToLower(parts[0])
	def, ok := fsDefaults[fsName]
	if !ok {
		return LaneSpec{}, fmt.Errorf("guest: lane spec %q: unknown filesystem %q (supported: %s)", s, parts[0], strings.Join(SupportedFS(), ", "))
	}
	spec := LaneSpec{Name: s, FS: fsName, InodeSize: def.inodeSize, SizeMiB: def.sizeMiB}
	seen := make(map[string]bool)
	blockSize := 0
	for _, opt := range parts[1:] {
		key, val, ok := strings.Cut(opt, "=")
		key = strings.ToLower(key) // no spaces: the spec is the default lane name
		if !ok || key == "" || val == "" {
			return LaneSpec{}, fmt.Errorf("guest: lane spec %q: option %q is not key=value", s, opt)
		}
		if seen[key] {
			return LaneSpec{}, fmt.Errorf("guest: lane spec %q: option %q given twice", s, key)
		}
		seen[key] = true
		if key != "name" && key != "size" && !slices.Contains(def.keys, key) {
			return LaneSpec{}, fmt.Errorf("guest: lane spec %q: unknown option %q for %s (accepted: %s)", s, key, fsName, strings.Join(append([]string{"name", "size"}, def.keys...), ", "))
		}
		if key == "name" {
			if err := CheckLaneName(val); err != nil {
				return LaneSpec{}, fmt.Errorf("guest: lane spec %q: name=: %w", s, err)
			}
			spec.Name = val
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil {
			return LaneSpec{}, fmt.Errorf("guest: lane spec %q: option %s=%q is not a number", s, key, val)
		}
		switch key {
		case "inode_size":
			if n < 128 || n > 4096 || n&(n-1) != 0 {
				return LaneSpec{}, fmt.Errorf("guest: lane spec %q: inode_size=%d: want a power of two from 128 to 4096", s, n)
			}
			spec.InodeSize = n
		case "size":
			if n < 1 || n > MaxSizeMiB {
				return LaneSpec{}, fmt.Errorf("guest: lane spec %q: size=%d: want 1 to %d MiB", s, n, MaxSizeMiB)
			}
			spec.SizeMiB = n
		case "block_size":
			if n != 1024 && n != 2048 && n != 4096 {
				return LaneSpec{}, fmt.Errorf("guest: lane spec %q: block_size=%d: want 1024, 2048 or 4096", s, n)
			}
			blockSize = n
			spec.setOption(key, strconv.Itoa(n))
		case "fat":
			if n != 12 && n != 16 && n != 32 {
				return LaneSpec{}, fmt.Errorf("guest: lane spec %q: fat=%d: want 12, 16 or 32", s, n)
			}
			spec.setOption(key, strconv.Itoa(n))
		case "mixed", "bigtime":
			if n != 0 && n != 1 {
				return LaneSpec{}, fmt.Errorf("guest: lane spec %q: %s=%d: want 0 or 1", s, key, n)
			}
			spec.setOption(key, strconv.Itoa(n))
		case "seed":
			if n < 0 || n > MaxSeed {
				return LaneSpec{}, fmt.Errorf("guest: lane spec %q: seed=%d: want 0 (empty) to %d", s, n, MaxSeed)
			}
			if n != 0 { // seed=0 is the empty image, the same as no seed
				spec.setOption(key, strconv.Itoa(n))
			}
		}
	}
	if fsName == "btrfs" {
		if _, ok := spec.Options["mixed"]; !ok {
			spec.setOption("mixed", "1")
		}
		least := btrfsMinMixedMiB
		if spec.Options["mixed"] == "0" {
			least = btrfsMinMiB
		}
		if spec.SizeMiB < least {
			return LaneSpec{}, fmt.Errorf("guest: lane spec %q: size=%d: mkfs.btrfs needs at least %d MiB with mixed=%s", s, spec.SizeMiB, least, spec.Options["mixed"])
		}
	}
	if fsName == "xfs" {
		if _, ok := spec.Options["bigtime"]; !ok {
			spec.setOption("bigtime", "1")
		}
		if spec.SizeMiB < xfsMinMiB {
			return LaneSpec{}, fmt.Errorf("guest: lane spec %q: size=%d: mkfs.xfs needs at least %d MiB", s, spec.SizeMiB, xfsMinMiB)
		}
	}
	if blockSize != 0 && spec.InodeSize > blockSize {
		return LaneSpec{}, fmt.Errorf("guest: lane spec %q: inode_size=%d exceeds block_size=%d", s, spec.InodeSize, blockSize)
	}
	if !seen["name"] && !defaultName.MatchString(spec.Name) {
		return LaneSpec{}, fmt.Errorf("guest: lane spec %q: name: the spec is the lane's name without name=, and as a name it is not 1 to %d of A-Z a-z 0-9 . _ + - : = (give one with :name=)", s, maxLaneName)
	}
	return spec, nil
}

func (l *LaneSpec) setOption(k, v string) {
	if l.Options == nil {
		l.Options = make(map[string]string)
	}
	l.Options[k] = v
}

// ParseLaneSpecs parses a comma-separated list of lane specs, e.g.
// "ext2,ext4". Lane names must be unique.
func ParseLaneSpecs(s string) ([]LaneSpec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("guest: empty lane spec list")
	}
	var specs []LaneSpec
	names := make(map[string]bool)
	for _, part := range strings.Split(s, ",") {
		spec, err := ParseLaneSpec(part)
		if err != nil {
			return nil, err
		}
		if names[spec.Name] {
			return nil, fmt.Errorf("guest: lane specs %q: duplicate lane name %q (rename one with :name=...)", s, spec.Name)
		}
		names[spec.Name] = true
		specs = append(specs, spec)
	}
	return specs, nil
}

// String returns the canonical spec with every setting explicit and the
// options sorted, without the name: two specs with equal String() make
// identical base images.
func (l LaneSpec) String() string {
	var b strings.Builder
	b.WriteString(l.FS)
	if l.InodeSize != 0 {
		fmt.Fprintf(&b, ":inode_size=%d", l.InodeSize)
	}
	fmt.Fprintf(&b, ":size=%d", l.SizeMiB)
	keys := make([]string, 0, len(l.Options))
	for k := range l.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, ":%s=%s", k, l.Options[k])
	}
	return b.String()
}

// SupportedFS lists the filesystems a lane spec may name.
func SupportedFS() []string {
	fs := make([]string, 0, len(fsDefaults))
	for k := range fsDefaults {
		fs = append(fs, k)
	}
	sort.Strings(fs)
	return fs
}

// maxLaneName is the longest lane name, in bytes.
const maxLaneName = 64

// laneName is a name= value's grammar; defaultName is a spec's without
// one (the spec itself, ':' and '=' besides). Lane names reach shell
// scripts, C sources and paths (/lanes/<name>, an export's files): nothing
// that quotes, expands, separates or escapes there.
var (
	laneName    = regexp.MustCompile(`^[A-Za-z0-9._+-]{1,64}$`)
	defaultName = regexp.MustCompile(`^[A-Za-z0-9._+:=-]{1,64}$`)
)

// CheckLaneName refuses a lane name outside [A-Za-z0-9._+-]{1,64}, and "."
// and "..": the name is a directory under /lanes and a word in exported
// reproducers.
func CheckLaneName(n string) error {
	if n == "." || n == ".." || !laneName.MatchString(n) {
		return fmt.Errorf("invalid lane name %q: want 1 to %d of A-Z a-z 0-9 . _ + - (not . or ..)", n, maxLaneName)
	}
	return nil
}
