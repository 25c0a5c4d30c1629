package agent

import (
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"google.golang.org/protobuf/proto"
)

func TestNewRequest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		op   proto.Message
		want *agentv1.Request
	}{
		{&agentv1.Mkdir{Lane: "a", Path: "d"}, &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: "a", Path: "d"}}}},
		{&agentv1.Sync{}, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}},
		{&agentv1.Umount{Lane: "x"}, &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: "x"}}}},
	} {
		if got := NewRequest(tt.op); !proto.Equal(got, tt.want) {
			t.Errorf("NewRequest(%v) = %v, want %v", tt.op, got, tt.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("NewRequest(a Response): want a panic")
		}
	}()
	NewRequest(&agentv1.Response{})
}
