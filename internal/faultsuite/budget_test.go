package faultsuite

import (
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"google.golang.org/grpc/codes"
)

// Budgets of the in-process daemon (limits.session_budget_mib and
// limits.daemon_budget_mib): a session may keep sessionBudget beyond its
// guest RAM, which a 128 MiB guest's first fork (its RAM shadow) and
// 96 MiB written into a lane both exceed.
const (
	sessionBudget = 64 << 20
	daemonBudget  = 1 << 30
)

// overBudget asks for more than the budgets allow, three ways: guest RAM
// past max_memory_mib, writes past the session budget, a fork whose RAM
// shadow does not fit. Each is RESOURCE_EXHAUSTED naming what ran out;
// only the session that wrote past its budget fails.
func overBudget(t *testing.T, s *suite, r *result) {
	_, err := s.c.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu", MemoryMib: 4096})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "memory limit") {
		t.Errorf("a 4096 MiB guest (max_memory_mib 2048): %v, want RESOURCE_EXHAUSTED naming the memory limit", err)
	}
	r.note("4096 MiB of guest RAM: %s", code(err))

	resp, err := s.c.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{"ext4:size=160"}, Backend: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	t0 := time.Now()
	var failed error
	for i := 0; i < 4 && failed == nil; i++ {
		for _, op := range []*themisv1.Op{
			{Op: &themisv1.Op_Write{Write: &agentv1.Write{Path: "big-" + string(rune('a'+i)), Flags: 0o100, Size: 32 << 20, Fill: 0x5a}}},
			{Op: &themisv1.Op_Sync{Sync: &agentv1.Sync{}}},
		} {
			if _, err := s.c.Apply(ctxFor(t, time.Minute), &themisv1.ApplyRequest{SessionId: id, Op: op}); err != nil {
				failed = err
				break
			}
		}
		s.probe(t, r)
	}
	if code(failed) != codes.ResourceExhausted || !strings.Contains(failed.Error(), "overlay") || !strings.Contains(failed.Error(), "limits.session_budget_mib") {
		t.Errorf("writing 128 MiB under a %d MiB budget: %v, want RESOURCE_EXHAUSTED naming the overlay and the key", sessionBudget>>20, failed)
	}
	r.note("writes past the %d MiB session budget: %s after %v; session %s", sessionBudget>>20, code(failed),
		time.Since(t0).Round(100*time.Millisecond), clip(s.wantState(t, id, themisv1.Session_STATE_FAILED)))

	id, _ = s.create(t)
	_, err = s.c.Fork(ctxFor(t, time.Minute), &themisv1.ForkRequest{SessionId: id})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "checkpoint RAM") {
		t.Errorf("a fork needing a 128 MiB RAM shadow under a %d MiB budget: %v, want RESOURCE_EXHAUSTED naming checkpoint RAM", sessionBudget>>20, err)
	}
	s.wantState(t, id, themisv1.Session_STATE_RUNNING)
	r.note("a fork past the budget: %s, the session still running; deleted in %v", code(err), s.delete(t, id, 10*time.Second).Round(time.Millisecond))
}
