package session

import (
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestWithLane: a run fills the lane of every lane op on a copy, the walk
// of a profile's ls/find included, and leaves the op as given.
func TestWithLane(t *testing.T) {
	t.Parallel()
	for _, op := range []*agentv1.Request{
		{Id: 7, Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d", Mode: 0o755}}},
		{Op: &agentv1.Request_Walk{Walk: &agentv1.Walk{Path: "tree", Recursive: true}}},
		{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{}}},
	} {
		m := op.ProtoReflect()
		kind := string(m.WhichOneof(m.Descriptor().Oneofs().ByName("op")).Name())
		got := withLane(op, kind, "ext2")
		var gotLane string
		switch o := got.Op.(type) {
		case *agentv1.Request_Mkdir:
			gotLane = o.Mkdir.GetLane()
		case *agentv1.Request_Walk:
			gotLane = o.Walk.GetLane()
		case *agentv1.Request_Umount:
			gotLane = o.Umount.GetLane()
		}
		if gotLane != "ext2" || got.Id != 0 {
			t.Errorf("withLane(%s) = %v: want lane ext2 and id 0", kind, got)
		}
		if op.String() == got.String() {
			t.Errorf("withLane(%s) changed its input", kind)
		}
	}
}
