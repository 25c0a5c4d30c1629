package baseimage

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/themisfs/themis/guest"
)

// Command is how a lane's base image is made from a shell, for a
// reproducer that runs without Themis: the mkfs command and its
// environment as Make runs them, the commands Make runs after it, and
// what Make rewrites in Go that no shell command does.
type Command struct {
	// Tool is the mkfs program (mkfs.ext2, mkfs.btrfs, ...).
	Tool string
	// Args are its arguments, the image path not included (it comes last).
	Args []string
	// Env are the environment additions (KEY=VALUE): the frozen clock,
	// E2FSPROGS_FAKE_TIME, BLKID_FILE.
	Env []string
	// After are commands to run after mkfs, each with the image path
	// appended (tune.exfat -I).
	After [][]string
	// GoOnly says what Make rewrites after mkfs in Go ("" nothing): a
	// shell-made image differs from the run's there.
	GoOnly string
}

// ShellCommand returns how spec's base image is made. It needs the same
// tools as Make (libfaketime's path goes into Env). Seeded ext images
// (debugfs) and overlay lanes are refused: a reproducer does not make them
// yet.
func ShellCommand(ctx context.Context, spec guest.LaneSpec) (Command, error) {
	if spec.IsOverlay() {
		return Command{}, fmt.Errorf("baseimage: %s: overlay lanes have no shell recipe yet", spec)
	}
	if guest.SeedTree(spec.Seed()) != nil {
		return Command{}, fmt.Errorf("baseimage: %s: seeded base images (debugfs) have no shell recipe yet", spec)
	}
	r, err := planBase(ctx, spec)
	if err != nil {
		return Command{}, err
	}
	c := Command{Tool: r.tool, Args: r.args, Env: r.env}
	switch spec.FS {
	case "exfat":
		c.After = [][]string{{"tune.exfat", "-I", "0x" + VolumeID}}
	case "btrfs":
		c.GoOnly = "btrfs.Pin rewrites the device, chunk-tree and subvolume UUIDs (" +
			strings.Join([]string{BtrfsDevUUID, BtrfsChunkTreeUUID, BtrfsSubvolUUID}, ", ") + ") and every inode and root item time (to " +
			fmt.Sprint(FakeTime) + ")"
	case "nilfs2":
		c.GoOnly = "nilfs2.Pin writes the UUID " + UUID + " into both superblocks"
	}
	return c, nil
}

// ShapeArgs are the mkfs options of spec that shape its filesystem (inode
// and block size, FAT type, checksum and mixed block groups, on-disk
// format), as mkfsArgs passes them, without the pins that make the image
// reproducible (UUIDs, hash seeds, volume ids, times) or the tool's own
// flags (-q, -F): what a test suite's MKFS_OPTIONS take. No tool is
// needed.
func ShapeArgs(spec guest.LaneSpec) ([]string, error) {
	switch spec.FS {
	case "ext2", "ext3", "ext4":
		args := []string{"-I", strconv.Itoa(spec.InodeSize)}
		if bs, ok := spec.Options["block_size"]; ok {
			args = append(args, "-b", bs)
		}
		return args, nil
	case "btrfs":
		args := []string{"--csum", "crc32c"}
		if spec.Options["mixed"] != "0" {
			args = append(args, "--mixed")
		}
		return args, nil
	case "vfat":
		if ft, ok := spec.Options["fat"]; ok {
			return []string{"-F", ft}, nil
		}
		return nil, nil
	case "xfs":
		return []string{"-m", "crc=1,bigtime=" + spec.Options["bigtime"]}, nil
	case "udf":
		return []string{"--media-type=hd", "--blocksize=512"}, nil
	case "minix":
		return []string{"-3"}, nil
	case "exfat", "f2fs", "nilfs2":
		return nil, nil
	}
	return nil, fmt.Errorf("baseimage: unknown filesystem %q", spec.FS)
}
