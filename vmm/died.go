package vmm

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/themisfs/themis/internal/kreport"
)

// GuestDiedError is the error of a call whose guest went away: it wraps
// ErrGuestDied (errors.Is) and the backend's own error, and carries the
// last lines of the guest's serial console at its death, where a kernel
// that crashed left its report (an Oops, a BUG, a panic; package
// internal/kreport reads them). A backend builds it only once the
// console is read to the end (QEMU: its pipe drained; KVM: the vCPU
// stopped), so the report's last line is in it.
type GuestDiedError struct {
	// Err is what the backend saw (the emulator's exit, the vCPU's stop,
	// the channel's error).
	Err error
	// Console is the console's last lines (at most MaxDeathConsole of
	// them, each cut as the backend keeps it), oldest first, one per
	// line, without indentation.
	Console string
	// Shown is how many of Console's last lines Error prints (0: all).
	Shown int
}

// MaxDeathConsole is how many console lines a GuestDiedError keeps: an
// Oops with its registers, module list and call trace, and the panic
// after it, is 60 to 120 lines.
const MaxDeathConsole = 200

// Error is ErrGuestDied's text, the backend's error and the console's last
// lines, indented (as the backends printed them before there was a type):
// the last Shown, or from the first line of the kernel report the console
// holds (kreport.Start) where that begins before them, so that the text
// (an API error's message) holds the whole report.
func (e *GuestDiedError) Error() string {
	lines := strings.Split(e.Console, "\n")
	if e.Console == "" {
		lines = []string{"(no console output)"}
	}
	if e.Shown > 0 && len(lines) > e.Shown {
		from := len(lines) - e.Shown
		if i := kreport.Start(lines); i >= 0 && i < from {
			from = i
		}
		lines = lines[from:]
	}
	return ErrGuestDied.Error() + ": " + e.Err.Error() + "\nconsole:\n  " + strings.Join(lines, "\n  ")
}

// Is makes a GuestDiedError an ErrGuestDied.
func (e *GuestDiedError) Is(target error) bool { return target == ErrGuestDied }

// Unwrap is the backend's error.
func (e *GuestDiedError) Unwrap() error { return e.Err }

// DeathConsole returns the console of the first GuestDiedError in err's
// chain, and whether there is one.
func DeathConsole(err error) (string, bool) {
	var gd *GuestDiedError
	if !errors.As(err, &gd) {
		return "", false
	}
	return gd.Console, true
}

// FailFastCmdline is the part of the guest kernel's command line, the
// same on every backend, that ends the guest the moment its kernel reports
// a fault, with the report on the console: an Oops or a BUG panics
// (oops=panic), so does a WARN unless warnNotFatal (panic_on_warn) and a
// soft lockup (softlockup_panic; the QEMU backend turns the lockup
// watchdog off, nowatchdog, since a TCG vCPU the host leaves unscheduled
// is no lockup of the guest's own), and a hung task (HungTaskCmdline);
// the console prints KERN_WARNING lines (loglevel=5, after any quiet: a
// WARN's first line is one). Each backend's own line has panic=-1, which
// reboots at once on a panic, and a reboot ends the machine: the call in
// flight fails with a GuestDiedError holding the report.
func FailFastCmdline(warnNotFatal bool) string {
	always := "oops=panic softlockup_panic=1 loglevel=5 " + HungTaskCmdline
	if warnNotFatal {
		return always + " panic_on_warn=0"
	}
	return always + " panic_on_warn=1"
}

// HungTaskTimeout is how long a task may sleep uninterruptibly (D state)
// without once being scheduled before the kernel's hung task detector
// reports it and, with hung_task_panic, panics: a report instead of a call
// timeout. The detector checks every HungTaskCheck, so a hung task is
// reported within HungTaskTimeout + 2*HungTaskCheck (40 s) of its block:
// under a session's call bound (session.Config.CallTimeout, 60 s; a run's,
// 2 min). It counts one sleep, not an op: every I/O that completes wakes
// the task, so only a wait that nothing ends counts (a frozen filesystem,
// a lost wakeup, a deadlock). The heaviest op measured on TCG on a loaded
// 2-core host, 12 MB written to btrfs and xfs lanes and then a sync, took
// 0.65 s and 0.1 s in all: 30 s is far above any legitimate wait.
const (
	HungTaskTimeout = 30 * time.Second
	HungTaskCheck   = 5 * time.Second
)

// HungTaskCmdline turns the hung task detector to HungTaskTimeout and
// HungTaskCheck and makes it panic (hung_task_panic=1); the kernel
// applies sysctl.* parameters before it runs init (Linux 5.8 and later).
var HungTaskCmdline = fmt.Sprintf("hung_task_panic=1 sysctl.kernel.hung_task_timeout_secs=%d sysctl.kernel.hung_task_check_interval_secs=%d",
	int(HungTaskTimeout/time.Second), int(HungTaskCheck/time.Second))
