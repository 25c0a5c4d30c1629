package agent

import (
	"fmt"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// NewRequest returns the request whose op is op, one of the operation
// messages of agentv1.Request's oneof (*agentv1.Mkdir, *agentv1.Sync, ...).
// Any other message is a programming error: it panics.
func NewRequest(op proto.Message) *agentv1.Request {
	req := &agentv1.Request{}
	r := req.ProtoReflect()
	want := op.ProtoReflect().Descriptor().FullName()
	fields := r.Descriptor().Oneofs().ByName("op").Fields()
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); fd.Message() != nil && fd.Message().FullName() == want {
			r.Set(fd, protoreflect.ValueOfMessage(op.ProtoReflect()))
			return req
		}
	}
	panic(fmt.Sprintf("agent: %s is not an operation of a Request", want))
}
