package hostfsck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/themisfs/themis/internal/hosttool"
	"github.com/themisfs/themis/internal/sandbox"
)

// Tool is the host's read-only checker of one lane filesystem's image:
// e2fsck -fn for ext2/3/4, btrfs check --readonly for btrfs (with
// --check-data-csum, so a flipped data bit is caught too), xfs_repair -n
// for xfs, fsck.exfat -n for exfat (Debian has no checker of udf or vfat
// images besides fsck.fat, which repairs). Explore's fsck
// self-reference and Corrupt's per-target check run it on the lane's
// resolved overlay, written to a scratch file.
type Tool struct {
	Name string   // the command as results and messages show it
	bin  string   // executable
	args []string // before the image path
	pkg  string   // Debian package
	// recover replays the filesystem's journal into the image, as a mount
	// would (nil: the checker has no such step here).
	recover []string
	// Limits bound each run (internal/sandbox; zero fields: sandbox.Default).
	Limits sandbox.Limits
}

// For returns the checker of filesystem fs ("ext2", "btrfs", ...), or
// an error saying that none applies.
func For(fs string) (Tool, error) {
	switch {
	case strings.HasPrefix(fs, "ext"):
		return Tool{Name: "e2fsck -fn", bin: "e2fsck", args: []string{"-fn"}, pkg: "e2fsprogs", recover: []string{"-E", "journal_only", "-y"}}, nil
	case fs == "btrfs":
		return Tool{Name: "btrfs check --readonly --check-data-csum", bin: "btrfs", args: []string{"check", "--readonly", "--check-data-csum"},
			pkg: "btrfs-progs"}, nil
	case fs == "xfs":
		return Tool{Name: "xfs_repair -n", bin: "xfs_repair", args: []string{"-n"}, pkg: "xfsprogs",
			Limits: sandbox.Limits{FileSize: sandbox.NoFileSizeLimit}}, nil
	case fs == "exfat":
		return Tool{Name: "fsck.exfat -n", bin: "fsck.exfat", args: []string{"-n"}, pkg: "exfatprogs"}, nil
	case fs == "f2fs":
		return Tool{Name: "fsck.f2fs --dry-run", bin: "fsck.f2fs", args: []string{"--dry-run"}, pkg: "f2fs-tools"}, nil
	case fs == "minix":
		return Tool{Name: "fsck.minix -f", bin: "fsck.minix", args: []string{"-f"}, pkg: "util-linux"}, nil
	}
	return Tool{}, fmt.Errorf("a host fsck is not supported for %s (ext2/3/4: e2fsck, btrfs: btrfs check, xfs: xfs_repair, exfat: fsck.exfat, f2fs: fsck.f2fs, minix: fsck.minix)", fs)
}

// Installed checks the checker is on the host's PATH.
func (f Tool) Installed() error {
	if _, err := exec.LookPath(f.bin); err != nil {
		return fmt.Errorf("%s not installed on the host (Debian %s)", f.bin, f.pkg)
	}
	return nil
}

// Verdict is what a checker says of an image.
type Verdict int

// Verdicts.
const (
	Clean  Verdict = iota // no errors
	Dirty                 // the filesystem has errors
	Broken                // the checker could not read the filesystem (no superblock, ...)
)

// Run checks image, a private copy the caller owns, in the sandbox
// (internal/sandbox: a timeout, rlimits, namespaces with a private root
// where the host allows). The output names the image "<image>". err is set
// only when the checker itself failed (not installed, timed out, killed by
// a signal, usage); a run without the namespaces says so in err's text only
// when it fails.
func (f Tool) Run(ctx context.Context, image string) (verdict Verdict, out []byte, err error) {
	bin, err := hosttool.Look(f.bin)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	res, err := sandbox.Run(ctx, f.Limits, bin, f.args, image)
	out = bytes.ReplaceAll(res.Output, []byte(res.Image), []byte("<image>"))
	out = bytes.ReplaceAll(out, []byte(image), []byte("<image>"))
	if err != nil {
		return 0, out, fmt.Errorf("%s (sandbox %s): %w: %s", f.Name, res.Isolation, err, Truncate(out, MaxOutput))
	}
	if res.ExitCode == 0 {
		return Clean, out, nil
	}
	return f.verdict(res.ExitCode, out)
}

// Recover replays image's journal in place, as a mount would (e2fsck -E
// journal_only -y for ext*: nothing without a journal), in the sandbox. A
// checker without such a step (btrfs replays its log tree only at mount;
// xfs_repair refuses a dirty log) returns ErrNoRecovery. A checker that
// ran and could not replay the image (the image's fault) wraps
// ErrReplayFailed; any other error is the checker's own failure, as for
// Run (not installed, timed out, killed by a signal, the sandbox's setup).
func (f Tool) Recover(ctx context.Context, image string) ([]byte, error) {
	if f.recover == nil {
		return nil, fmt.Errorf("%s: %w", f.Name, ErrNoRecovery)
	}
	bin, err := hosttool.Look(f.bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	st, err := os.Stat(image)
	if err != nil {
		return nil, fmt.Errorf("%s journal replay: %w", f.bin, err)
	}
	lim := f.Limits
	lim.WritableImage, lim.FileSize = true, max(st.Size(), 1) // it writes inside the image, never past it
	res, err := sandbox.Run(ctx, lim, bin, f.recover, image)
	out := bytes.ReplaceAll(res.Output, []byte(res.Image), []byte("<image>"))
	if err != nil {
		return out, fmt.Errorf("%s journal replay (sandbox %s): %w: %s", f.bin, res.Isolation, err, Truncate(out, MaxOutput))
	}
	return out, replayStatus(f.bin, res.ExitCode, out)
}

// replayStatus is the error of a journal replay that exited with code
// and said out: ErrNoSpace when a write into the image failed for want of
// room on the host's file system (e2fsck says so, answers "Ignore error?
// yes" under -y and exits as if it had replayed: the image is then half
// replayed, not the state's fault), ErrReplayFailed for exit status 4 and
// up, else nil.
func replayStatus(bin string, code int, out []byte) error {
	switch {
	case bytes.Contains(out, noSpace):
		return fmt.Errorf("%s journal replay: exit status %d: %w: %s", bin, code, ErrNoSpace, Truncate(out, MaxOutput))
	case code > 3: // 1, 2: corrected (replayed); 4 and up: not
		return fmt.Errorf("%s journal replay: exit status %d: %w: %s", bin, code, ErrReplayFailed, Truncate(out, MaxOutput))
	}
	return nil
}

// noSpace is how e2fsck reports a write that failed with ENOSPC ("Error
// writing block 1299 (No space left on device).  Ignore error? yes"). A
// write inside the image cannot fail so for the image's own sake: past its
// size the sandbox's RLIMIT_FSIZE makes it EFBIG.
var noSpace = []byte("(No space left on device)")

// ErrNoSpace is Recover's error for a replay whose writes into the image
// failed because the image's file system on the host was full (ENOSPC):
// the host's failure, not the image's.
var ErrNoSpace = errors.New("no space left on the image's file system on the host (ENOSPC)")

// ErrNoRecovery is Recover's error for a filesystem whose journal the host
// cannot replay.
var ErrNoRecovery = errors.New("no journal replay on the host")

// ErrReplayFailed is Recover's error for an image whose journal the
// checker ran on and could not replay (e2fsck's exit status 4 and up).
var ErrReplayFailed = errors.New("the journal replay failed on this image")

// verdict maps a non-zero exit status of the checker.
func (f Tool) verdict(code int, out []byte) (Verdict, []byte, error) {
	switch filepath.Base(f.bin) {
	case "e2fsck", "fsck.exfat", "fsck.minix", "fsck.f2fs":
		// e2fsck's exit status is a bit set: 1 and 2 corrected (not with
		// -n), 4 left uncorrected, 8 operational error; fsck.exfat and
		// fsck.f2fs (f2fs-tools since 1.14: --dry-run finding errors
		// exits 4) use the same bits.
		switch {
		case code >= 1 && code <= 7:
			return Dirty, out, nil
		case code >= 8 && code <= 15:
			return Broken, out, nil
		}
	case "xfs_repair":
		// xfs_repair -n exits 1 when it finds corruption, and when it
		// finds no superblock at all.
		if code == 1 && bytes.Contains(out, []byte("could not find valid secondary superblock")) {
			return Broken, out, nil
		}
		if code == 1 {
			return Dirty, out, nil
		}
	default:
		if code != 1 {
			break
		}
		// btrfs check exits 1 both for errors found and for a filesystem
		// it cannot open (bad superblock, unreadable tree root).
		if bytes.Contains(out, []byte("cannot open file system")) {
			return Broken, out, nil
		}
		return Dirty, out, nil
	}
	return 0, out, fmt.Errorf("%s: exit status %d: %s", f.Name, code, Truncate(out, MaxOutput))
}

// MaxOutput caps the checker output quoted in a finding or an error.
const MaxOutput = 2048

// Truncate is b trimmed, cut to n bytes ("..." marks a cut).
func Truncate(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Command is the checker's command line before the image path.
func (t Tool) Command() []string { return append([]string{t.bin}, t.args...) }

// RecoverCommand is the journal replay's command line before the image
// path, nil when the host has no such step for the filesystem.
func (t Tool) RecoverCommand() []string {
	if t.recover == nil {
		return nil
	}
	return append([]string{t.bin}, t.recover...)
}

// Package is the Debian package of the checker.
func (t Tool) Package() string { return t.pkg }
