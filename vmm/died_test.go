package vmm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestGuestDiedError: the typed death is an ErrGuestDied through any
// wrapping, wraps the backend's error, prints the last Shown console lines
// as the backends did, and hands its whole console to DeathConsole.
func TestGuestDiedError(t *testing.T) {
	base := errors.New("exit status 1")
	con := "a\nb\nKernel panic - not syncing: sysrq triggered crash"
	err := fmt.Errorf("session: %w", &GuestDiedError{Err: base, Console: con, Shown: 2})
	if !errors.Is(err, ErrGuestDied) || !errors.Is(err, base) {
		t.Errorf("%v: not ErrGuestDied, or does not wrap the backend's error", err)
	}
	if want := "session: vmm: guest died: exit status 1\nconsole:\n  b\n  Kernel panic - not syncing: sysrq triggered crash"; err.Error() != want {
		t.Errorf("text %q, want %q", err.Error(), want)
	}
	if got, ok := DeathConsole(err); !ok || got != con {
		t.Errorf("DeathConsole = %q %v, want the whole console", got, ok)
	}
	if _, ok := DeathConsole(ErrBroken); ok {
		t.Error("DeathConsole of an error without a GuestDiedError: found one")
	}
	if got := (&GuestDiedError{Err: base}).Error(); !strings.HasSuffix(got, "(no console output)") {
		t.Errorf("no console: %q", got)
	}
}

// TestGuestDiedErrorReport: a kernel report that begins before the last
// Shown lines is printed whole, from its first line; console lines before
// it are not.
func TestGuestDiedErrorReport(t *testing.T) {
	con := "booted\n[ 41.7] cut here\n[ 41.7] kernel BUG at fs/ext4/namei.c:3477!\n[ 41.7] RIP: 0010:ext4_link+0x1c/0x90 [ext4]\n" +
		"[ 41.7] Call Trace:\n[ 41.7]  vfs_link+0x1e2/0x330\n[ 41.7] Kernel panic - not syncing: Fatal exception"
	got := (&GuestDiedError{Err: errors.New("exit status 1"), Console: con, Shown: 2}).Error()
	want := "vmm: guest died: exit status 1\nconsole:\n  [ 41.7] kernel BUG at fs/ext4/namei.c:3477!\n  [ 41.7] RIP: 0010:ext4_link+0x1c/0x90 [ext4]\n" +
		"  [ 41.7] Call Trace:\n  [ 41.7]  vfs_link+0x1e2/0x330\n  [ 41.7] Kernel panic - not syncing: Fatal exception"
	if got != want {
		t.Errorf("text %q,\nwant %q", got, want)
	}
}

// TestFailFastCmdline: a WARN panics unless the caller says otherwise, and
// the loglevel that shows a WARN's first line is there either way, so is
// a hung task's panic, at 30 s checked every 5 s.
func TestFailFastCmdline(t *testing.T) {
	for _, tc := range []struct {
		notFatal bool
		want     string
	}{{false, "panic_on_warn=1"}, {true, "panic_on_warn=0"}} {
		got := strings.Fields(FailFastCmdline(tc.notFatal))
		for _, w := range []string{"oops=panic", "softlockup_panic=1", "loglevel=5", tc.want,
			"hung_task_panic=1", "sysctl.kernel.hung_task_timeout_secs=30", "sysctl.kernel.hung_task_check_interval_secs=5"} {
			if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
				t.Errorf("FailFastCmdline(%v) = %q: no %s", tc.notFatal, got, w)
			}
		}
	}
}
