package check

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/runs/exploration"
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

// TestRunSideBySide: auto runs the parts side by side (both start before
// either ends), each explore part with one guest, and the sinks are
// called one at a time; Parallel 1 runs them one after another.
func TestRunSideBySide(t *testing.T) {
	for _, tc := range []struct {
		parallel, want int
		overlap        bool
	}{
		{parallel: 0, want: 3, overlap: true},
		{parallel: 1, want: 1, overlap: false},
	} {
		m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
		var inside atomic.Int32
		var events []string
		enter := func(what string, p *Part) {
			if inside.Add(1) != 1 {
				t.Errorf("parallel %d: a sink called while another runs", tc.parallel)
			}
			events = append(events, what+" "+p.Name())
			inside.Add(-1)
		}
		sum, err := Run(context.Background(), m, Options{Lanes: []string{"ext2", "ext4"}, Kinds: []string{KindDifferential, KindReference},
			Reference: NoReference, Budget: MinBudget, Depth: 1, Seed: 1, Parallel: tc.parallel}, Sinks{
			Started:  func(p *Part) { enter("start", p) },
			Progress: func(p *Part, _ exploration.Progress) { enter("progress", p) },
			Done:     func(p *Part) { enter("done", p) },
		})
		if err != nil {
			t.Fatalf("parallel %d: %v", tc.parallel, err)
		}
		if sum.Parallel != tc.want || sum.ParallelWhy == "" {
			t.Errorf("parallel %d: ran %d at once (%q), want %d", tc.parallel, sum.Parallel, sum.ParallelWhy, tc.want)
		}
		var order []string
		for _, e := range events {
			if !strings.HasPrefix(e, "progress") {
				order = append(order, strings.Fields(e)[0])
			}
		}
		// At most one part at a time runs one after another (a part
		// whose share is too small ends unstarted); side by side, all
		// three start first.
		running, most := 0, 0
		for _, e := range order {
			if e == "start" {
				running++
			} else if running > 0 {
				running--
			}
			most = max(most, running)
		}
		if overlap := most == 3; overlap != tc.overlap || (!tc.overlap && most != 1) {
			t.Errorf("parallel %d: events %v, want overlap %v", tc.parallel, order, tc.overlap)
		}
		for _, p := range sum.Parts {
			if p.Skipped != "" && !tc.overlap {
				continue
			}
			if p.Err != "" || p.Explore == nil || p.Explore.States == 0 {
				t.Errorf("parallel %d: part %s: err %q, explore %+v", tc.parallel, p.Name(), p.Err, p.Explore)
			} else if tc.overlap && p.Explore.Workers != 1 {
				t.Errorf("parallel %d: part %s ran %d workers, want 1 beside another part", tc.parallel, p.Name(), p.Explore.Workers)
			}
		}
	}
}
