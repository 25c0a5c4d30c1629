package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/session"
)

// TestSessionStates: every session state has its own API value, an
// unresponsive session included, and a guest call past its deadline is
// DeadlineExceeded.
func TestSessionStates(t *testing.T) {
	t.Parallel()
	for st, want := range map[session.State]themisv1.Session_State{
		session.StateRunning:      themisv1.Session_STATE_RUNNING,
		session.StateEnded:        themisv1.Session_STATE_ENDED,
		session.StateFailed:       themisv1.Session_STATE_FAILED,
		session.StateUnresponsive: themisv1.Session_STATE_UNRESPONSIVE,
		"bogus":                   themisv1.Session_STATE_UNSPECIFIED,
	} {
		if got := sessionState(st); got != want {
			t.Errorf("sessionState(%q) = %v, want %v", st, got, want)
		}
	}
	err := fmt.Errorf("session s-1 is unresponsive: stat: %w: %w", session.ErrUnresponsive, context.DeadlineExceeded)
	if got := status.Code(toStatus(err)); got != codes.DeadlineExceeded {
		t.Errorf("toStatus(%v) = %v, want DeadlineExceeded", err, got)
	}
}
