package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// Verdicts of a death, the same on every run that uses them.
const (
	// KernelCrash: the guest's kernel died with a report on its console
	// (an Oops, a BUG, a WARN, a panic, a lockup, a hung task).
	KernelCrash = api.KernelCrash
	// Hung: the guest gave no answer within the call's bound
	// (session.RunCallTimeout) and left no report.
	Hung = api.Hung
	// Died: the guest went away without a report (the emulator exited,
	// the agent's channel broke or answered the impossible).
	Died = api.Died
)

// Death is a guest lost under a run's call.
type Death struct {
	// Report is the kernel's report, nil when its console held none.
	Report *kreport.Report
	// Hung says the call got no answer within its bound.
	Hung bool
	// Err is the call's error.
	Err error
}

// Of reads err as a death: a call's error that means the guest is gone
// (session.ErrGuestGone) while ctx, the run's, still lives. A cancelled
// run is no death, nor is any other error.
func Of(ctx context.Context, err error) (*Death, bool) {
	if err == nil || ctx.Err() != nil || !errors.Is(err, session.ErrGuestGone) {
		return nil, false
	}
	d := &Death{Err: err, Hung: errors.Is(err, context.DeadlineExceeded)}
	if console, ok := vmm.DeathConsole(err); ok {
		if r, ok := kreport.Parse(console); ok {
			d.Report = r
		}
	}
	return d, true
}

// Verdict is KernelCrash, Hung or Died.
func (d *Death) Verdict() string {
	switch {
	case d.Report != nil:
		return KernelCrash
	case d.Hung:
		return Hung
	}
	return Died
}

// Summary is the death in one line: the report's (kreport.Report.Summary),
// or what the call saw.
func (d *Death) Summary() string {
	switch {
	case d.Report != nil:
		return d.Report.Summary()
	case d.Hung:
		return fmt.Sprintf("no answer within %s and no kernel report on the console", session.RunCallTimeout)
	}
	return "the guest died without a kernel report: " + firstLine(d.Err.Error())
}

// Output is what a result shows of the death: the report's text, or the
// summary.
func (d *Death) Output() string {
	if d.Report != nil && d.Report.Text != "" {
		return d.Report.Text
	}
	return d.Summary()
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
