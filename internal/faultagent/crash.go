package faultagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// CrashOn is a fault fixed when the agent is built, not armed from the
// host: the kernel crashes, or a task hangs, on the requests it names. It
// is a comma-separated list of triggers:
//
//	mkdir, mkdir:PATH       a mkdir (of PATH, lane-relative as the request
//	                        has it), before it is served: the kernel crashes
//	mount:LANE              a Mount of lane LANE ("crash:ext2": a crash
//	                        state's spare disk), before it is served: the
//	                        kernel crashes
//	mountfail:LANE          a Mount of LANE that fails: the kernel crashes
//	                        instead of the failure's answer (as a kernel
//	                        that crashes mounting a corrupt image)
//	freeze, freeze:PATH     a mkdir (of PATH): its lane's filesystem is
//	                        frozen first (FIFREEZE), so that the mkdir
//	                        blocks in D state (sb_start_write) for good: a
//	                        hung task (the filesystem must support freezing:
//	                        ext4, xfs, btrfs; not ext2)
//
// "" is none. A trigger also fires for a request inside a batch. The
// themisfault agent takes it from its link-time variable
// (cmd/themis-agent: -ldflags "-X main.crashOn=mkdir:d-01"), so every
// guest booted from that image, a replacement's too, crashes on the same
// requests: a test of what a kernel crash does to a run.
type CrashOn string

// Trigger kinds of a CrashOn.
const (
	onMkdir     = "mkdir"
	onMount     = "mount"
	onMountFail = "mountfail"
	onFreeze    = "freeze"
)

// trigger is one of a CrashOn's: its kind and argument ("": any).
type trigger struct{ kind, arg string }

// triggers parses c.
func (c CrashOn) triggers() ([]trigger, error) {
	if c == "" {
		return nil, nil
	}
	var out []trigger
	for _, s := range strings.Split(string(c), ",") {
		kind, arg, _ := strings.Cut(strings.TrimSpace(s), ":")
		switch {
		case kind == onMkdir || kind == onFreeze:
		case (kind == onMount || kind == onMountFail) && arg != "":
		default:
			return nil, fmt.Errorf("faultagent: crash on %q: trigger %q: want mkdir[:PATH], mount:LANE, mountfail:LANE or freeze[:PATH]", string(c), s)
		}
		out = append(out, trigger{kind, arg})
	}
	return out, nil
}

// Check says whether c is a CrashOn the agent knows ("" is).
func (c CrashOn) Check() error {
	_, err := c.triggers()
	return err
}

// requests is req and the requests of its batch.
func requests(req *agentv1.Request) []*agentv1.Request {
	return append([]*agentv1.Request{req}, req.GetBatch().GetRequests()...)
}

// fires reports whether t fires for r, before it is served: a mkdir or a
// mount it names (mountfail acts on the answer: matchesMount).
func (t trigger) fires(r *agentv1.Request) bool {
	switch m := r.GetMkdir(); {
	case m != nil && (t.kind == onMkdir || t.kind == onFreeze):
		return t.arg == "" || m.GetPath() == t.arg
	case t.kind == onMount:
		return r.GetMount() != nil && r.GetMount().GetLane() == t.arg
	}
	return false
}

// before is what c does before req is served: crash the kernel, or freeze
// the lanes of the mkdirs a freeze trigger names.
func (c CrashOn) before(req *agentv1.Request) (crash bool, freeze []string) {
	ts, _ := c.triggers()
	for _, r := range requests(req) {
		for _, t := range ts {
			switch {
			case !t.fires(r):
			case t.kind == onFreeze:
				freeze = append(freeze, r.GetMkdir().GetLane())
			default:
				crash = true
			}
		}
	}
	return crash, freeze
}

// watchesMount reports whether req (or a request of its batch) is a Mount
// whose failure crashes the kernel (mountfail).
func (c CrashOn) watchesMount(req *agentv1.Request) bool {
	ts, _ := c.triggers()
	for _, r := range requests(req) {
		for _, t := range ts {
			if t.kind == onMountFail && r.GetMount() != nil && r.GetMount().GetLane() == t.arg {
				return true
			}
		}
	}
	return false
}

// failed reports whether resp, or a response of its batch, holds an errno.
func failed(resp *agentv1.Response) bool {
	if resp.GetErrno() != 0 {
		return true
	}
	for _, r := range resp.GetBatch().GetResponses() {
		if r.GetErrno() != 0 {
			return true
		}
	}
	return false
}

// sysrqTrigger is where crash writes: "c" makes the kernel panic
// ("sysrq: Trigger a crash", "Kernel panic - not syncing: sysrq triggered
// crash", its call trace), whatever kernel.sysrq says.
const sysrqTrigger = "/proc/sysrq-trigger"

// laneRoot is where the agent mounts its lanes (inguest.Server.Root).
const laneRoot = "/lanes"

// fiFreeze is linux/fs.h's FIFREEZE, _IOWR('X', 119, int).
const fiFreeze = 0xc0045877

// crash makes the kernel panic; it returns only when it could not.
func (c *Channel) crash() {
	c.log.Warn("crashing the kernel (faultagent crash on)", zap.String("crash_on", string(c.opt.CrashOn)))
	if err := os.WriteFile(c.opt.SysrqTrigger, []byte("c"), 0); err != nil {
		c.log.Error("crash: write the sysrq trigger", zap.String("path", c.opt.SysrqTrigger), zap.Error(err))
	}
}

// freeze freezes lane's filesystem (FIFREEZE on its root), so that the
// next write to it blocks until a thaw that never comes.
func (c *Channel) freeze(lane string) {
	dir := filepath.Join(c.opt.LaneRoot, lane)
	c.log.Warn("freezing a lane (faultagent crash on): its next writer hangs", zap.String("lane", dir))
	f, err := os.Open(dir)
	if err != nil {
		c.log.Error("freeze: open the lane", zap.Error(err))
		return
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0); err != nil {
		c.log.Error("freeze: FIFREEZE", zap.String("lane", dir), zap.Error(err))
	}
}
