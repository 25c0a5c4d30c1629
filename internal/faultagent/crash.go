package faultagent

import (
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// CrashOn is a fault fixed when the agent is built, not armed from the
// host: the kernel crashes on every mkdir request it names. "mkdir" is
// every mkdir, "mkdir:PATH" those of PATH (lane-relative, as the request
// has it); "" none. The themisfault agent takes it from its link-time
// variable (cmd/themis-agent: -ldflags "-X main.crashOn=mkdir:d-01"), so
// every guest booted from that image, a replacement's too, crashes on
// the same op: a test of what a kernel crash does to a run.
type CrashOn string

// matches reports whether req, or a request in its batch, is a mkdir c
// names.
func (c CrashOn) matches(req *agentv1.Request) bool {
	kind, path, _ := strings.Cut(string(c), ":")
	if kind != "mkdir" {
		return false
	}
	reqs := append([]*agentv1.Request{req}, req.GetBatch().GetRequests()...)
	for _, r := range reqs {
		if m := r.GetMkdir(); m != nil && (path == "" || m.GetPath() == path) {
			return true
		}
	}
	return false
}

// Check says whether c is a CrashOn the agent knows ("" is).
func (c CrashOn) Check() error {
	kind, _, _ := strings.Cut(string(c), ":")
	if c != "" && kind != "mkdir" {
		return fmt.Errorf("faultagent: crash on %q: want \"mkdir\" or \"mkdir:PATH\"", string(c))
	}
	return nil
}

// sysrqTrigger is where crash writes: "c" makes the kernel panic
// ("sysrq: Trigger a crash", "Kernel panic - not syncing: sysrq triggered
// crash", its call trace), whatever kernel.sysrq says.
const sysrqTrigger = "/proc/sysrq-trigger"

// crash makes the kernel panic; it returns only when it could not.
func (c *Channel) crash() {
	c.log.Warn("crashing the kernel (faultagent crash on)", zap.String("crash_on", string(c.opt.CrashOn)))
	if err := os.WriteFile(c.opt.SysrqTrigger, []byte("c"), 0); err != nil {
		c.log.Error("crash: write the sysrq trigger", zap.String("path", c.opt.SysrqTrigger), zap.Error(err))
	}
}
