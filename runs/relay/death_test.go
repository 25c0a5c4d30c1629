package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// TestOf reads a call's error as a death: a gone guest whose console holds
// a report is a kernel crash carrying it, one past the call's bound a
// hang, any other a plain death; an error that is not a gone guest, or
// one of a cancelled run, is no death.
func TestOf(t *testing.T) {
	sysrq, err := os.ReadFile("../../internal/kreport/testdata/hungtask.txt")
	if err != nil {
		t.Fatal(err)
	}
	gone := func(err error) error { return fmt.Errorf("mount crash state: %w: %w", session.ErrGuestGone, err) }
	died := &vmm.GuestDiedError{Err: errors.New("qemu exited"), Console: string(sysrq)}
	quiet := &vmm.GuestDiedError{Err: errors.New("qemu exited"), Console: "[    1.0] booted\n"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name    string
		ctx     context.Context
		err     error
		dead    bool
		verdict string
		summary string
	}{
		{"nil", context.Background(), nil, false, "", ""},
		{"another error", context.Background(), errors.New("EIO"), false, "", ""},
		{"not gone, with a console", context.Background(), died, false, "", ""},
		{"a report", context.Background(), gone(died), true, KernelCrash, "INFO: task kworker/u2:1:45 blocked for more than 120 seconds.; panic: hung_task: blocked tasks"},
		{"a hang", context.Background(), gone(context.DeadlineExceeded), true, Hung, "no answer within 2m0s"},
		{"a death without a report", context.Background(), gone(quiet), true, Died, "the guest died without a kernel report: mount crash state: guest gone: vmm: guest died: qemu exited"},
		{"a cancelled run", cancelled, gone(died), false, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := Of(tc.ctx, tc.err)
			if ok != tc.dead {
				t.Fatalf("Of = %+v, %v: want a death %v", d, ok, tc.dead)
			}
			if !ok {
				return
			}
			if d.Verdict() != tc.verdict || !strings.HasPrefix(d.Summary(), tc.summary) {
				t.Errorf("verdict %q, summary %q: want %q, %q...", d.Verdict(), d.Summary(), tc.verdict, tc.summary)
			}
			if (d.Report != nil) != (tc.verdict == KernelCrash) || (d.Report != nil && !strings.HasPrefix(d.Output(), "INFO: task")) {
				t.Errorf("report %+v, output %q: want the report with a kernel crash alone", d.Report, d.Output())
			}
		})
	}
}
