//go:build !linux

package inguest

import (
	"errors"
	"syscall"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// handle answers every request with ENOSYS: the agent runs only on Linux.
func (s *Server) handle(req *agentv1.Request, resp *agentv1.Response) {
	fail(resp, "request", "", errorf(syscall.ENOSYS, "%v", errors.ErrUnsupported))
}
