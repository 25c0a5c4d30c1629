package inguest

import (
	"strings"
	"syscall"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func batchOf(reqs ...*agentv1.Request) *agentv1.Request {
	return &agentv1.Request{Id: 9, Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: reqs}}}
}

// TestBatch: a batch runs its requests in order, each answered as if it
// came alone (errnos per request, ids echoed); a bad batch runs nothing.
func TestBatch(t *testing.T) {
	s, _ := newServer(t)
	mk := mkdir("d")
	mk.Id = 1
	resp := must(t, s, batchOf(mk, mkdir("d"), fp(agentv1.TimeMode_TIME_MODE_NONE, true), rmdir("nope")))
	got := resp.GetBatch().GetResponses()
	if resp.GetId() != 9 || len(got) != 4 {
		t.Fatalf("batch response id %d with %d responses, want id 9 and 4", resp.GetId(), len(got))
	}
	wantErrno := []syscall.Errno{0, syscall.EEXIST, 0, syscall.ENOENT}
	for i, r := range got {
		if errnoOf(r) != wantErrno[i] {
			t.Errorf("response %d: errno %v (%s), want %v", i, errnoOf(r), r.GetError(), wantErrno[i])
		}
	}
	if got[0].GetId() != 1 {
		t.Errorf("first response id %d, want the request's 1", got[0].GetId())
	}
	if leaves := got[2].GetFingerprint().GetLeaves(); len(leaves) < 2 {
		t.Errorf("fingerprint in the batch: %d leaves, want the root and d (the mkdir before it ran)", len(leaves))
	}
	// Every response carries the agent's time on it; the batch's covers
	// its requests'.
	var sum int64
	for i, r := range got {
		if r.GetAgentNs() <= 0 {
			t.Errorf("response %d: agent_ns %d, want > 0", i, r.GetAgentNs())
		}
		sum += r.GetAgentNs()
	}
	if resp.GetAgentNs() < sum {
		t.Errorf("batch agent_ns %d, want at least its responses' %d", resp.GetAgentNs(), sum)
	}

	tooMany := make([]*agentv1.Request, MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = mkdir("many")
	}
	for _, tt := range []struct {
		name string
		req  *agentv1.Request
		want string
	}{
		{"too many", batchOf(tooMany...), "at most"},
		{"nested", batchOf(mkdir("nested"), batchOf(mkdir("inner"))), "do not nest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := s.Handle(tt.req)
			if errnoOf(resp) != syscall.EINVAL || !strings.Contains(resp.GetError(), tt.want) || resp.GetBatch() != nil {
				t.Errorf("errno %v (%q), batch %v; want EINVAL naming %q and no results", errnoOf(resp), resp.GetError(), resp.GetBatch(), tt.want)
			}
		})
	}
	for _, p := range []string{"many", "nested", "inner"} {
		if errnoOf(s.Handle(rmdir(p))) != syscall.ENOENT {
			t.Errorf("%s exists: a refused batch ran", p)
		}
	}
}

// TestBatchBudget: responses past the reply budget become E2BIG; the
// requests still ran.
func TestBatchBudget(t *testing.T) {
	s, _ := newServer(t)
	old := batchBudget
	batchBudget = 200
	defer func() { batchBudget = old }()
	var reqs []*agentv1.Request
	for range 10 {
		reqs = append(reqs, create("f"), fp(agentv1.TimeMode_TIME_MODE_ALL, true))
	}
	reqs = append(reqs, mkdir("last"))
	got := must(t, s, batchOf(reqs...)).GetBatch().GetResponses()
	if len(got) != len(reqs) {
		t.Fatalf("%d responses, want %d", len(got), len(reqs))
	}
	if errnoOf(got[0]) != 0 || errnoOf(got[len(got)-1]) != syscall.E2BIG {
		t.Errorf("first errno %v, last %v: want the first answered and the last cut (E2BIG)", errnoOf(got[0]), errnoOf(got[len(got)-1]))
	}
	if errnoOf(s.Handle(mkdir("last"))) != syscall.EEXIST {
		t.Error("the request whose answer was cut did not run")
	}
}
