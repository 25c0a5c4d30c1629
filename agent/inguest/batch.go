package inguest

import (
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// MaxBatch bounds the requests of one Batch.
const MaxBatch = 64

// batchBudget is what a BatchResult's responses may take of a reply frame:
// MaxFrame less room for the outer response and each entry's tag and
// length.
var batchBudget = agent.MaxFrame - 4096 // a variable for tests

// batch runs a Batch's requests in order through Handle and collects their
// responses; see agentv1.Batch. A batch larger than MaxBatch or holding a
// batch is refused before anything runs.
func (s *Server) batch(b *agentv1.Batch, resp *agentv1.Response) {
	reqs := b.GetRequests()
	if len(reqs) > MaxBatch {
		fail(resp, "batch", "", errorf(syscall.EINVAL, "%d requests: at most %d", len(reqs), MaxBatch))
		return
	}
	for i, r := range reqs {
		if _, nested := r.GetOp().(*agentv1.Request_Batch); nested {
			fail(resp, "batch", "", errorf(syscall.EINVAL, "request %d is a batch: batches do not nest", i))
			return
		}
	}
	out := &agentv1.BatchResult{Responses: make([]*agentv1.Response, 0, len(reqs))}
	used := 0
	for _, r := range reqs {
		sub := s.Handle(r)
		n := proto.Size(sub) + 16 // the entry's tag and length
		if used+n > batchBudget {
			sub = &agentv1.Response{Id: r.GetId(), Errno: int32(syscall.E2BIG), Error: "batch: response does not fit the reply frame"}
			n = proto.Size(sub) + 16
		}
		used += n
		out.Responses = append(out.Responses, sub)
	}
	resp.Result = &agentv1.Response_Batch{Batch: out}
}
