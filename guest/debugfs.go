package guest

import (
	"context"
	"fmt"
	"time"

	"regexp"
	"strconv"

	"github.com/themisfs/themis/internal/hosttool"
	"github.com/themisfs/themis/internal/sandbox"
)

// InodeTimes are an inode's timestamps as stored on disk, read by debugfs.
type InodeTimes struct {
	// Atime, Mtime, Ctime are seconds since the epoch with the on-disk epoch
	// bits applied (for 128-byte inodes, the signed 32-bit field).
	Atime, Mtime, Ctime int64
	// AtimeNs, MtimeNs, CtimeNs are the nanoseconds from the *_extra fields (0 without them).
	AtimeNs, MtimeNs, CtimeNs int64
}

var debugfsTime = regexp.MustCompile(`(?m)^\s*([acm])time: 0x([0-9a-f]{1,8})(?::([0-9a-f]{1,8}))?`)

// DebugfsLimits bound ExtInodeTimes's debugfs run (a stat of one inode).
var DebugfsLimits = sandbox.Limits{Timeout: 2 * time.Minute, CPU: time.Minute, Memory: 2 << 30,
	FileSize: 1 << 20, Files: 64, Output: 256 << 10}

// ExtInodeTimes reads a file's timestamps from an ext2/3/4 image on the host
// with debugfs (e2fsprogs), read-only, in internal/sandbox: image is a
// private copy of a guest-written image (untrusted). path is absolute
// inside the filesystem.
func ExtInodeTimes(ctx context.Context, image, path string) (InodeTimes, error) {
	bin, err := hosttool.Look("debugfs")
	if err != nil {
		return InodeTimes{}, fmt.Errorf("guest: debugfs stat %s: %w", path, err)
	}
	res, err := sandbox.Run(ctx, DebugfsLimits, bin, []string{"-R", "stat " + path}, image)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit status %d", res.ExitCode)
	}
	if err != nil {
		return InodeTimes{}, fmt.Errorf("guest: debugfs stat %s (Debian package e2fsprogs; sandbox %s): %w: %s", path, res.Isolation, err, res.Output)
	}
	return parseDebugfsTimes(res.Output)
}

func parseDebugfsTimes(out []byte) (InodeTimes, error) {
	var t InodeTimes
	seen := 0
	for _, m := range debugfsTime.FindAllSubmatch(out, -1) {
		lo, err := strconv.ParseUint(string(m[2]), 16, 32)
		if err != nil {
			return t, fmt.Errorf("guest: debugfs time %q: %w", m[2], err)
		}
		sec, ns := int64(int32(lo)), int64(0)
		if len(m[3]) > 0 {
			extra, err := strconv.ParseUint(string(m[3]), 16, 32)
			if err != nil {
				return t, fmt.Errorf("guest: debugfs time extra %q: %w", m[3], err)
			}
			// ext4 *_extra: low 2 bits extend the epoch, the rest are nanoseconds << 2.
			sec += int64(extra&3) << 32
			ns = int64(extra >> 2)
		}
		switch string(m[1]) {
		case "a":
			t.Atime, t.AtimeNs = sec, ns
		case "m":
			t.Mtime, t.MtimeNs = sec, ns
		case "c":
			t.Ctime, t.CtimeNs = sec, ns
		}
		seen++
	}
	if seen < 3 {
		return t, fmt.Errorf("guest: debugfs output has %d of 3 timestamps:\n%s", seen, out)
	}
	return t, nil
}
