package exploration

import (
	"context"
	"sync"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// countingMachine counts the machine checkpoints and the agent requests
// by kind.
type countingMachine struct {
	*sessiontest.Machine
	mu          sync.Mutex
	checkpoints int
	requests    map[string]int
	// walked: a fingerprint walked the lanes since they were last mounted.
	walked bool
}

func (c *countingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	c.mu.Lock()
	switch op := req.GetOp().(type) {
	case *agentv1.Request_Umount:
		c.requests["umount"]++
	case *agentv1.Request_Mount:
		c.requests["mount"]++
		c.walked = false
	case *agentv1.Request_Fingerprint:
		c.requests["other"]++
		c.walked = true
	case *agentv1.Request_Batch:
		// A step: the op, then the fingerprints of the state it leads to.
		c.requests["other"]++
		if rs := op.Batch.GetRequests(); len(rs) > 0 && rs[0].GetFingerprint() == nil && c.walked {
			c.requests["op after a walk"]++
		}
		c.walked = true
	default:
		c.requests["other"]++
	}
	c.mu.Unlock()
	return c.Machine.Call(ctx, req)
}

func (c *countingMachine) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	c.mu.Lock()
	c.checkpoints++
	c.mu.Unlock()
	return c.Machine.Checkpoint(ctx)
}

// TestRevertStrategies runs the same search on the fake machine with each
// revert: machine takes machine checkpoints and no mounts; remount takes
// none and unmounts and mounts every lane at each checkpoint and restore;
// auto resolves by backend.
func TestRevertStrategies(t *testing.T) {
	var last *countingMachine
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine {
		last = &countingMachine{Machine: &sessiontest.Machine{}, requests: map[string]int{}}
		return last
	})
	auto, _ := Revert(launch.QEMU) // the fake boots as qemu
	tests := []struct {
		revert, want string
		remounts     bool
	}{
		{RevertMachine, RevertMachine, false},
		{RevertRemount, RevertRemount, true},
		{"", auto, auto == RevertRemount},
	}
	for _, tt := range tests {
		t.Run(tt.want+"/"+tt.revert, func(t *testing.T) {
			sum, err := Run(context.Background(), m, Options{Workers: 1, Lanes: []string{"ext2", "ext4"}, Depth: 2, Branching: 3, Seed: 7, Revert: tt.revert}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Every Metis kind once at the root (more than branching 3).
			n := len(explore.MetisOps)
			if sum.Revert != tt.want || sum.States != n || sum.Unique != 1 {
				t.Errorf("summary revert %q, %d states, %d unique; want %q, %d, 1", sum.Revert, sum.States, sum.Unique, tt.want, n)
			}
			lm := last
			lm.mu.Lock()
			defer lm.mu.Unlock()
			// Boot mounts each lane once; the root checkpoint and the n-1
			// restores remount both, and so does the first child: the
			// root's fingerprint walked the lanes after the checkpoint's
			// mount, and no op runs in a walked mount unless its trace
			// says so (keep_mount), or a replay could not do as it did.
			wantMounts, wantUmounts, wantCheckpoints := 2, 0, 1
			if tt.remounts {
				wantMounts, wantUmounts, wantCheckpoints = 2+(n+1)*2, (n+1)*2, 0
				if got := lm.requests["op after a walk"]; got != 0 {
					t.Errorf("%d ops ran in a mount a fingerprint had walked, want 0", got)
				}
			}
			if lm.requests["mount"] != wantMounts || lm.requests["umount"] != wantUmounts || lm.checkpoints != wantCheckpoints {
				t.Errorf("%d mounts, %d umounts, %d machine checkpoints; want %d, %d, %d",
					lm.requests["mount"], lm.requests["umount"], lm.checkpoints, wantMounts, wantUmounts, wantCheckpoints)
			}
		})
	}
}

func TestDiskStackIsAStack(t *testing.T) {
	t.Parallel()
	d := diskStack{ids: []string{"d1", "d2"}, depths: [][]int{{2}, {3}}}
	if got, err := d.top("d2"); err != nil || got[0] != 3 {
		t.Errorf("top(d2) = %v, %v; want [3]", got, err)
	}
	for _, id := range []string{"d1", "d9", ""} {
		if _, err := d.top(id); err == nil {
			t.Errorf("top(%q) succeeded: only the newest checkpoint may be named", id)
		}
	}
	if _, err := (&diskStack{}).top("d1"); err == nil {
		t.Error("top on an empty stack succeeded")
	}
}

func TestRevertByBackend(t *testing.T) {
	t.Parallel()
	for backend, want := range map[string]string{launch.QEMU: RevertRemount, launch.KVM: RevertMachine} {
		if got, why := Revert(backend); got != want || why == "" {
			t.Errorf("Revert(%s) = %q (%q), want %q with a reason", backend, got, why, want)
		}
	}
}
