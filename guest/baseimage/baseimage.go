package baseimage

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/themisfs/themis/fsimage/btrfs"
	"github.com/themisfs/themis/fsimage/nilfs2"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/hosttool"
	"github.com/zeebo/blake3"
)

// baseFormat versions the base-image recipe; change it when the mkfs
// arguments change.
const baseFormat = "themis-base-image/v1"

// Pinned values that would otherwise differ between mkfs runs.
const (
	// FakeTime is the time (Unix seconds, 2001-09-09) mke2fs writes
	// into ext* base images.
	FakeTime = 1000000000
	// UUID is the filesystem UUID and directory hash seed of ext* base
	// images.
	UUID = "7e3a1500-0000-4000-8000-000000000001"
	// VolumeID is the volume id of vfat base images and (as
	// 0x7e3a1500, set with tune.exfat -I) the volume serial of exfat ones.
	VolumeID = "7e3a1500"
	// UDFUUID is the first 16 characters of a udf base image's volume set
	// identifier (mkudffs --uuid).
	UDFUUID = "7e3a150000000001"
	// BtrfsDevUUID, BtrfsChunkTreeUUID and BtrfsSubvolUUID are
	// what btrfs base images get for the UUIDs mkfs.btrfs draws at random
	// (its -U sets only the filesystem UUID, UUID); their times are
	// FakeTime. See btrfs.Pin.
	BtrfsDevUUID       = "7e3a1500-0000-4000-8000-000000000002"
	BtrfsChunkTreeUUID = "7e3a1500-0000-4000-8000-000000000003"
	BtrfsSubvolUUID    = "7e3a1500-0000-4000-8000-000000000004"
)

// btrfsPinFormat versions the rewrite of btrfs base images after mkfs
// (btrfs.Pin); it is part of their cache key.
const btrfsPinFormat = "btrfs-pin/v1"

// nilfs2PinFormat versions the rewrite of nilfs2 base images (their UUID,
// UUID's value) after mkfs.
const nilfs2PinFormat = "nilfs2-pin/v1 " + UUID

// Make returns the path of the filesystem image for spec under
// <cacheDir>/bases/, making it with the host's mkfs if it is not cached:
// empty, or with an ext* spec's seed= holding [guest.SeedTree] (written with
// debugfs after mkfs). cacheDir "" means guest.DefaultCacheDir(). The image is
// byte-identical for equal spec.String() and mkfs (and debugfs) version, run
// after run and host after host. It is shared by every caller: open it
// read-only. For an overlay lane it is the image of its upper layer
// (spec.Layer()'s: an empty ext2); its lower layer's is Make of
// spec.Lower().
// The cache is bounded by DefaultMaxBytes (Maker for another bound).
func Make(ctx context.Context, cacheDir string, spec guest.LaneSpec) (string, error) {
	return makeWithin(ctx, cacheDir, spec, DefaultMaxBytes)
}

// makeWithin is Make with the cache bounded by maxBytes (Maker).
func makeWithin(ctx context.Context, cacheDir string, spec guest.LaneSpec, maxBytes int64) (string, error) {
	spec = spec.Layer()
	dir, err := guest.CacheDir(cacheDir)
	if err != nil {
		return "", err
	}
	r, err := planBase(ctx, spec)
	if err != nil {
		return "", err
	}
	bases := BasesDir(dir)
	out := filepath.Join(bases, r.key()+".img")
	size := int64(spec.SizeMiB) << 20
	if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() && st.Size() == size {
		return out, markUsed(out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("baseimage: %w", err)
	}
	if err := r.build(ctx, bases, out, size); err != nil {
		return "", err
	}
	if _, err := evict(bases, out, maxBytes); err != nil {
		return "", err
	}
	return out, nil
}

// baseRecipe is how Make makes one base image: the mkfs tool, its
// arguments and environment, the seed tree and the debugfs that writes it
// (ext* with seed= only), and the recipe lines its cache key hashes.
type baseRecipe struct {
	spec      guest.LaneSpec
	tool, bin string // mkfs.<fs> and its path
	args, env []string
	tree      []guest.SeedEntry // nil for an empty image
	debugfs   string            // debugfs's path when tree is set
	recipe    []string
	after     pinFunc // rewrites what mkfs drew at random, or nil
}

// planBase checks spec (a single layer) and finds the tools that make its
// image, with the identities that go into its cache key.
func planBase(ctx context.Context, spec guest.LaneSpec) (*baseRecipe, error) {
	if spec.SizeMiB < 1 || spec.SizeMiB > guest.MaxSizeMiB {
		return nil, fmt.Errorf("baseimage: %s: size %d MiB out of range", spec, spec.SizeMiB)
	}
	r := &baseRecipe{spec: spec, tool: "mkfs." + spec.FS}
	var err error
	if r.args, r.env, err = mkfsArgs(spec); err != nil {
		return nil, err
	}
	if r.bin, err = hosttool.Look(r.tool); err != nil {
		return nil, fmt.Errorf("baseimage: %w", err)
	}
	ident, err := toolIdentity(ctx, spec.FS, r.bin)
	if err != nil {
		return nil, err
	}
	r.recipe = []string{baseFormat, spec.String(), ident}
	pins, err := planPins(ctx, spec)
	if err != nil {
		return nil, err
	}
	r.recipe = append(r.recipe, pins.recipe...)
	r.env = append(r.env, pins.env...)
	r.after = pins.after
	r.tree = guest.SeedTree(spec.Seed())
	if r.tree != nil {
		if !strings.HasPrefix(spec.FS, "ext") {
			return nil, fmt.Errorf("baseimage: %s: seed is for ext2/3/4 images", spec)
		}
		if r.debugfs, err = hosttool.Look("debugfs"); err != nil {
			return nil, fmt.Errorf("baseimage: %w", err)
		}
		id, err := debugfsIdentity(ctx, r.debugfs)
		if err != nil {
			return nil, err
		}
		r.recipe = append(r.recipe, seedDigest(r.tree), id)
	}
	return r, nil
}

// key is the image's cache key: the hex blake3 of the length-prefixed
// recipe lines.
func (r *baseRecipe) key() string {
	h := blake3.New()
	for _, f := range r.recipe {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:]) // blake3's Write never fails
		h.WriteString(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// BasesDir is where Make keeps the base images of the cache dir cacheDir.
func BasesDir(cacheDir string) string { return filepath.Join(cacheDir, "bases") }

// TempPrefixes are the name prefixes of Make's temporaries in BasesDir: the
// image mkfs writes before its rename, and a seed tree's scratch dir. Make
// removes them itself; a process killed mid-make leaves them behind.
var TempPrefixes = []string{".mkfs-", ".seed-"}

// build makes the image of size bytes in a temporary file under bases,
// checks mkfs kept its size, syncs it, makes it read-only and renames it to
// out.
func (r *baseRecipe) build(ctx context.Context, bases, out string, size int64) error {
	spec := r.spec
	if err := os.MkdirAll(bases, 0o755); err != nil {
		return fmt.Errorf("baseimage: %w", err)
	}
	f, err := os.CreateTemp(bases, ".mkfs-*.img")
	if err != nil {
		return fmt.Errorf("baseimage: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after a successful rename
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("baseimage: %s: %w", spec, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("baseimage: %s: %w", spec, err)
	}
	if err := r.format(ctx, bases, tmp, size); err != nil {
		return err
	}
	st, err := os.Stat(tmp)
	if err != nil {
		return fmt.Errorf("baseimage: %s: %w", spec, err)
	}
	if st.Size() != size {
		return fmt.Errorf("baseimage: %s: %s changed the image size to %d bytes", spec, r.tool, st.Size())
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return fmt.Errorf("baseimage: %w", err)
	}
	// A file rename replaces an existing target atomically; a concurrent
	// maker wrote the same bytes.
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("baseimage: %w", err)
	}
	return nil
}

// format runs mkfs on the image file img of size bytes, pins a btrfs
// image's random values, and writes the seed tree (in a scratch directory
// under bases) when there is one.
func (r *baseRecipe) format(ctx context.Context, bases, img string, size int64) error {
	spec := r.spec
	if err := runMkfs(ctx, r.bin, append(r.args, img), r.env); err != nil {
		return fmt.Errorf("baseimage: %s: %w", spec, err)
	}
	if r.after != nil {
		if err := r.after(ctx, img, size); err != nil {
			return fmt.Errorf("baseimage: %s: %w", spec, err)
		}
	}
	if r.tree == nil {
		return nil
	}
	scratch, err := os.MkdirTemp(bases, ".seed-*")
	if err != nil {
		return fmt.Errorf("baseimage: %w", err)
	}
	err = seedExt(ctx, r.debugfs, img, scratch, r.tree)
	if rerr := os.RemoveAll(scratch); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("baseimage: %s: %w", spec, err)
	}
	return nil
}

// mkfsArgs returns the mkfs arguments (without the target) and environment
// additions for spec.
func mkfsArgs(spec guest.LaneSpec) (args, env []string, err error) {
	switch spec.FS {
	case "ext2", "ext3", "ext4":
		args = []string{"-q", "-F",
			"-I", strconv.Itoa(spec.InodeSize),
			"-U", UUID,
			// root_owner: mke2fs otherwise makes / owned by the caller's uid.
			"-E", "hash_seed=" + UUID + ",root_owner=0:0",
		}
		if bs, ok := spec.Options["block_size"]; ok {
			args = append(args, "-b", bs)
		}
		return args, []string{"E2FSPROGS_FAKE_TIME=" + strconv.Itoa(FakeTime)}, nil
	case "btrfs":
		// -K: no TRIM of the image file. mkfs.btrfs reads no fake time
		// and draws the device, chunk tree and subvolume UUIDs itself:
		// pinBtrfs rewrites those afterwards.
		args = []string{"-q", "-f", "-K", "-U", UUID, "--csum", "crc32c"}
		if spec.Options["mixed"] != "0" {
			args = append(args, "--mixed")
		}
		// mkfs.btrfs refuses a -U UUID that libblkid's cache already knows,
		// and the cache remembers image files earlier tools probed (our own
		// base images among them): no cache.
		return args, []string{"BLKID_FILE=/dev/null"}, nil
	case "vfat":
		args = []string{"--invariant", "-i", VolumeID}
		if ft, ok := spec.Options["fat"]; ok {
			args = append(args, "-F", ft)
		}
		return args, nil, nil
	case "xfs":
		// -K: no TRIM. v5 (crc=1) is mkfs.xfs's default; bigtime is
		// always set. The inode times come from the (frozen) clock.
		return []string{"-q", "-f", "-K", "-m", "crc=1,uuid=" + UUID + ",bigtime=" + spec.Options["bigtime"]}, nil, nil
	case "exfat":
		// The volume serial mkfs.exfat draws from the clock is pinned
		// afterwards (tune.exfat -I).
		return nil, nil, nil
	case "udf":
		return []string{"--media-type=hd", "--blocksize=512", "--uuid=" + UDFUUID}, nil, nil
	case "f2fs":
		// -T: the inodes' times; the checkpoint's come from the
		// (frozen) clock.
		return []string{"-q", "-f", "-U", UUID, "-T", strconv.Itoa(FakeTime)}, nil, nil
	case "minix":
		return []string{"-3"}, nil, nil // v3: 60-byte names, 32-bit times
	case "nilfs2":
		// No UUID option: pinNilfs2 writes it afterwards. The times
		// come from the (frozen) clock.
		return []string{"-q", "-f"}, nil, nil
	}
	return nil, nil, fmt.Errorf("baseimage: unknown filesystem %q", spec.FS)
}

// runMkfs runs mkfs with an environment cleaned of the e2fsprogs variables
// that change the result (MKE2FS_CONFIG stays: its file is part of the
// cache key).
func runMkfs(ctx context.Context, bin string, args, env []string) error {
	var clean []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "MKE2FS_") && k != "MKE2FS_CONFIG") || strings.HasPrefix(k, "E2FSPROGS_") {
			continue
		}
		clean = append(clean, kv)
	}
	return hosttool.RunEnv(ctx, "", append(clean, env...), bin, args...)
}

// toolIdentity is what, besides the spec, determines the image: the mkfs
// binary, its reported library version and (for mke2fs) its config file.
func toolIdentity(ctx context.Context, fsName, bin string) (string, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("baseimage: read %s: %w", bin, err)
	}
	sum := blake3.Sum256(b)
	id := []string{"binary=" + hex.EncodeToString(sum[:])}
	if fsName == "vfat" || fsName == "udf" || fsName == "minix" { // no version option (mkfs.minix's is util-linux's)
		return strings.Join(id, "\n"), nil
	}
	out, err := version(ctx, bin)
	if err != nil {
		return "", fmt.Errorf("baseimage: %s -V: %w", bin, err)
	}
	id = append(id, "version="+out)
	if fsName != "ext2" && fsName != "ext3" && fsName != "ext4" {
		return strings.Join(id, "\n"), nil // no config file
	}
	conf := os.Getenv("MKE2FS_CONFIG")
	if conf == "" {
		conf = "/etc/mke2fs.conf"
	}
	c, err := os.ReadFile(conf)
	switch {
	case err == nil:
		csum := blake3.Sum256(c)
		id = append(id, "config="+hex.EncodeToString(csum[:]))
	case errors.Is(err, fs.ErrNotExist):
		id = append(id, "config=none") // mke2fs uses its built-in defaults
	default:
		return "", fmt.Errorf("baseimage: read %s: %w", conf, err)
	}
	return strings.Join(id, "\n"), nil
}

// debugfsIdentity is what, besides the seed tree, determines how debugfs
// writes it: its binary and reported version.
func debugfsIdentity(ctx context.Context, bin string) (string, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("baseimage: read %s: %w", bin, err)
	}
	sum := blake3.Sum256(b)
	out, err := version(ctx, bin)
	if err != nil {
		return "", fmt.Errorf("baseimage: %s -V: %w", bin, err)
	}
	return "debugfs binary=" + hex.EncodeToString(sum[:]) + "\nversion=" + out, nil
}

// pinBtrfs rewrites what mkfs.btrfs drew at random or from the clock in
// the image at p (see btrfs.Pin).
func pinBtrfs(p string, size int64) error {
	var pins btrfs.Pins
	for _, u := range []struct {
		s   string
		dst *[16]byte
	}{{BtrfsDevUUID, &pins.DevUUID}, {BtrfsChunkTreeUUID, &pins.ChunkTreeUUID}, {BtrfsSubvolUUID, &pins.SubvolUUID}} {
		var err error
		if *u.dst, err = parseUUID(u.s); err != nil {
			return err
		}
	}
	pins.Time = FakeTime
	return rewrite(p, func(f *os.File) error { return btrfs.Pin(f, size, pins) })
}

// pinNilfs2 writes UUID into the image at p (see nilfs2.Pin).
func pinNilfs2(p string, size int64) error {
	uuid, err := parseUUID(UUID)
	if err != nil {
		return err
	}
	return rewrite(p, func(f *os.File) error { return nilfs2.Pin(f, size, uuid) })
}

// parseUUID parses a UUID in its dashed text form.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		return u, fmt.Errorf("pin: bad UUID %q", s)
	}
	copy(u[:], b)
	return u, nil
}

// rewrite opens the image at p for writing, runs pin on it and closes it.
func rewrite(p string, pin func(*os.File) error) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := pin(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncFile(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("baseimage: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("baseimage: sync %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("baseimage: %w", err)
	}
	return nil
}

// version is a tool's -V banner, trimmed. exfatprogs prints it and exits
// 1.
func version(ctx context.Context, bin string) (string, error) {
	out, err := hosttool.Output(ctx, "", nil, bin, "-V")
	var te *hosttool.Error
	if errors.As(err, &te) && strings.HasPrefix(te.Stderr, "exfatprogs version") {
		return te.Stderr, nil
	}
	return strings.TrimSpace(out), err
}
