package kvm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/themisfs/themis/vmm"
)

// TestConsoleDeathText: a dead guest's error carries the last lines as
// written (a partial last line too), not indented, and reads as an
// ErrGuestDied with its report (a panic's last line is often the one
// before the reset).
func TestConsoleDeathText(t *testing.T) {
	t.Parallel()
	c := newConsole(nil, "")
	for i := range vmm.MaxDeathConsole + 5 {
		fmt.Fprintf(c, "line %d\n", i)
	}
	fmt.Fprint(c, "Kernel Offset: disabled")
	lines := strings.Split(c.text(vmm.MaxDeathConsole), "\n")
	if len(lines) != vmm.MaxDeathConsole+1 || lines[0] != "line 5" || lines[len(lines)-1] != "Kernel Offset: disabled" {
		t.Errorf("text: %d lines, %q .. %q", len(lines), lines[0], lines[len(lines)-1])
	}
	m := &Machine{console: c}
	err := m.died(errors.New("the guest reset the machine"))
	if con, ok := vmm.DeathConsole(err); !ok || !errors.Is(err, vmm.ErrGuestDied) || !strings.HasSuffix(con, "Kernel Offset: disabled") {
		t.Errorf("died: %v", err)
	}
}
