package exploration

import (
	"context"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// slowMachine is a machine double whose every agent call takes 100 ms,
// so that a search lasts far longer than the caps of these tests.
type slowMachine struct{ *sessiontest.Machine }

func (s *slowMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Machine.Call(ctx, req)
}

func newSlow(vmm.Config) vmm.Machine { return &slowMachine{&sessiontest.Machine{}} }

// TestExploreMaxRunDuration checks the daemon's cap on a run's time: a run
// that would last minutes ends at the cap, with its summary saying so and
// its session ended.
func TestExploreMaxRunDuration(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{MaxRunDuration: 300 * time.Millisecond}, newSlow)
	start := time.Now()
	sum, err := Run(context.Background(), m, Options{Workers: 1, Lanes: []string{"ext2"}, Depth: 4}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("run took %v past a 300ms cap", took)
	}
	if sum.Stopped != StopMaxRunDuration {
		t.Errorf("Stopped = %q, want %q", sum.Stopped, StopMaxRunDuration)
	}
	in, err := m.Get(context.Background(), sum.Session)
	if err != nil || in.State != session.StateEnded || !strings.Contains(in.Reason, "max run duration") {
		t.Errorf("session after the cap: %+v, %v: want ended, reason naming the max run duration", in, err)
	}
}

// TestDeleteCancelsRun checks that deleting a run's session cancels the
// run: Delete returns once the run has ended, and the slot is free.
func TestDeleteCancelsRun(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{MaxSessions: 1}, newSlow)
	ctx := context.Background()
	type result struct {
		sum *Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2"}, Depth: 4}, nil, nil)
		done <- result{sum, err}
	}()
	var id string
	for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); {
		if ins, err := m.List(ctx, false); err == nil && len(ins) == 1 {
			id = ins[0].ID
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if id == "" {
		t.Fatal("the run's session never appeared")
	}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := m.Delete(dctx, id); err != nil {
		t.Fatalf("Delete of a run's session: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.sum.Stopped != "cancelled" {
			t.Errorf("run after Delete: %+v, %v: want Stopped cancelled", r.sum, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run still going 20s after Delete returned")
	}
	in, err := m.Get(ctx, id)
	if err != nil || in.State != session.StateEnded || !strings.Contains(in.Reason, "deleted") {
		t.Errorf("session after Delete: %+v, %v: want ended, reason naming the delete", in, err)
	}
	if _, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}}); err != nil {
		t.Errorf("Create after the run was cancelled (max_sessions 1): %v", err)
	}
}
