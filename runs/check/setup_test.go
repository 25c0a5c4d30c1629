package check

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// refusingMachine refuses mkdir of d-00/d-00 on lane ext4 (EBADMSG), as
// a filesystem whose new directory block fails its checksum does.
type refusingMachine struct{ *sessiontest.Machine }

func (r *refusingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	return sessiontest.Unbatch(ctx, req, func(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
		if mk := req.GetMkdir(); mk != nil && mk.GetLane() == "ext4" && mk.GetPath() == "d-00/d-00" {
			return &agentv1.Response{Errno: int32(syscall.EBADMSG), Error: "mkdir: bad message"}, nil
		}
		return r.Machine.Call(ctx, req)
	})
}

// TestSetupFailsEmptyRoot: when the filesystem refuses an op of the
// populated root, the explore part says which and runs from the empty
// root instead of failing.
func TestSetupFailsEmptyRoot(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine {
		return &refusingMachine{Machine: &sessiontest.Machine{}}
	})
	part := &Part{Kind: KindDifferential, Lanes: []string{"ext2", "ext4"}, Budget: 3 * time.Second, weight: weightDifferential}
	if err := runExplore(context.Background(), m, Options{Depth: 1, Seed: 1}, part, Sinks{}); err != nil {
		t.Fatalf("runExplore: %v, want the part run from the empty root", err)
	}
	if !strings.Contains(part.SetupFailed, "op 3 (mkdir d-00/d-00 0755) failed on lane ext4") || part.Explore == nil || part.Explore.States == 0 {
		t.Errorf("part: setup failed %q, explore %+v; want the refused op named and the run from the empty root", part.SetupFailed, part.Explore)
	}
}
