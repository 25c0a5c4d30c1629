package hostfsck

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/sandbox"
)

// TestRecover: an ext4 image flagged as needing recovery loses the flag
// once Recover replays its journal (the sandbox let it write the image);
// a checker with no host replay says ErrNoRecovery.
func TestRecover(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs", "dumpe2fs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required under CI=true (Debian e2fsprogs): %v", tool, err)
			}
			t.Skipf("skipped: %s not installed (Debian e2fsprogs)", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "ext4.img")
	for _, argv := range [][]string{{"truncate", "-s", "64M", img}, {"mkfs.ext4", "-q", "-F", img}, {"debugfs", "-w", "-R", "feature needs_recovery", img}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	features := func() string {
		out, err := exec.Command("dumpe2fs", "-h", img).Output()
		if err != nil {
			t.Fatalf("dumpe2fs: %v", err)
		}
		return string(out)
	}
	if !strings.Contains(features(), "needs_recovery") {
		t.Fatal("debugfs did not flag the image as needing recovery")
	}
	tool, err := For("ext4")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tool.Recover(context.Background(), img); err != nil {
		t.Fatalf("Recover: %v\n%s", err, out)
	}
	if strings.Contains(features(), "needs_recovery") {
		t.Error("Recover left the image needing recovery: the journal was not replayed into it")
	}
	if v, out, err := tool.Run(context.Background(), img); err != nil || v != Clean {
		t.Errorf("after Recover: verdict %v, %v\n%s", v, err, out)
	}
	btrfs, err := For("btrfs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := btrfs.Recover(context.Background(), img); !errors.Is(err, ErrNoRecovery) {
		t.Errorf("btrfs Recover: %v, want ErrNoRecovery", err)
	}
}

// TestRecoverFailures tells the image's failure from the checker's: a
// replay e2fsck runs and cannot do (an image that is no filesystem) wraps
// ErrReplayFailed, a crash state's verdict (runs/crashcheck: broken); a
// replay past its sandbox's time wraps sandbox.ErrTimeout and not
// ErrReplayFailed, a failure of the host that crashcheck returns as the
// run's error (before, both were the state's "broken", a crash finding).
func TestRecoverFailures(t *testing.T) {
	if _, err := exec.LookPath("e2fsck"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("e2fsck is required under CI=true: %v", err)
		}
		t.Skipf("skipped: e2fsck not installed: %v", err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage.img")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte{0x5a}, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		timeout   time.Duration // the sandbox's; 0: the tool's
		want      error
		imageFail bool // wraps ErrReplayFailed
	}{
		{"not a filesystem", 0, ErrReplayFailed, true},
		{"past its time", time.Millisecond, sandbox.ErrTimeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool, err := For("ext4")
			if err != nil {
				t.Fatal(err)
			}
			if tt.timeout > 0 {
				tool.Limits.Timeout = tt.timeout
			}
			_, err = tool.Recover(context.Background(), garbage)
			if !errors.Is(err, tt.want) || errors.Is(err, ErrReplayFailed) != tt.imageFail {
				t.Errorf("Recover: %v; want it to wrap %v, ErrReplayFailed %v", err, tt.want, tt.imageFail)
			}
		})
	}
}

// TestReplayStatus: what a journal replay's exit status and output make
// of it. A write the host had no room for (e2fsck ignores it under -y and
// exits 1 or 4, the image half replayed) is ErrNoSpace, never
// ErrReplayFailed: it is not the image's fault.
func TestReplayStatus(t *testing.T) {
	t.Parallel()
	const enospc = "<image>: recovering journal\nError writing block 1299 (No space left on device).  Ignore error? yes\n\n" +
		"/usr/sbin/e2fsck: Input/output error while recovering journal of <image>\n"
	for _, tt := range []struct {
		name string
		code int
		out  string
		want error // nil: none
	}{
		{"replayed", 1, "<image>: recovering journal\n", nil},
		{"nothing to replay", 0, "", nil},
		{"not replayed", 8, "Bad magic number in super-block\n", ErrReplayFailed},
		{"ENOSPC, exit 1", 1, enospc, ErrNoSpace},
		{"ENOSPC, exit 12", 12, enospc, ErrNoSpace},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := replayStatus("e2fsck", tt.code, []byte(tt.out))
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("replayStatus(%d, %q) = %v, want %v", tt.code, tt.out, err, tt.want)
			}
			if tt.want == ErrNoSpace && errors.Is(err, ErrReplayFailed) {
				t.Errorf("replayStatus(%d, ENOSPC) = %v: wraps ErrReplayFailed (a crash finding)", tt.code, err)
			}
		})
	}
}
