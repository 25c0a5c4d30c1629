package crashcheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// recordingMachine is the session double that also records the kind of
// every agent request it answers (a batch's each), a fingerprint's with
// its lane. Apply asks each lane once.
type recordingMachine struct {
	sessiontest.Machine
	mu  sync.Mutex
	log []string
}

func (m *recordingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	reqs := []*agentv1.Request{req}
	if b, ok := req.GetOp().(*agentv1.Request_Batch); ok {
		reqs = b.Batch.GetRequests()
	}
	m.mu.Lock()
	for _, r := range reqs {
		kind := strings.TrimPrefix(fmt.Sprintf("%T", r.GetOp()), "*agentv1.Request_")
		if fp := r.GetFingerprint(); fp != nil {
			kind += " " + fp.GetLane()
		}
		m.log = append(m.log, kind)
	}
	m.mu.Unlock()
	return m.Machine.Call(ctx, req)
}

// TestPrepareWalks: a search's path (NoSetupSync) is replayed with a walk
// of every lane after each of its ops, as the search fingerprinted after
// every op; a setup given with its sync runs as it is, then the sync.
func TestPrepareWalks(t *testing.T) {
	setup, err := parseOps("setup", []string{"mkdir d 0755", "create d/f 0644", "write d/f 0 10 0x55"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sync bool
		want []string
	}{
		{"search path", false, []string{"Mkdir", "Mkdir", "Fingerprint l0", "Fingerprint l1", "Create", "Create", "Fingerprint l0", "Fingerprint l1",
			"Write", "Write", "Fingerprint l0", "Fingerprint l1"}},
		{"synced setup", true, []string{"Mkdir", "Mkdir", "Create", "Create", "Write", "Write", "Sync"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec *recordingMachine
			m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine {
				rec = &recordingMachine{}
				return rec
			})
			ctx := context.Background()
			run, err := m.Acquire(ctx, session.CreateOptions{Lanes: []string{"ext2:name=l0", "ext2:name=l1"}}, "crash")
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			rec.mu.Lock()
			rec.log = nil // what the session's start asked
			rec.mu.Unlock()
			tr := &tracer{run: run, p: &plan{setup: setup, setupSync: tt.sync}}
			if err := tr.prepare(ctx); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			got := slices.DeleteFunc(slices.Clone(rec.log), func(k string) bool {
				return !slices.Contains([]string{"Mkdir", "Create", "Write", "Sync"}, k) && !strings.HasPrefix(k, "Fingerprint ")
			})
			if !slices.Equal(got, tt.want) {
				t.Errorf("the agent was asked %q, want %q", got, tt.want)
			}
		})
	}
}
