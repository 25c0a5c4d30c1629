//go:build !themisfault

package main

import (
	"io"

	"go.uber.org/zap"
)

// faultChannel is the agent's channel as it is. Only the agent built with
// the themisfault tag, the fault suite's (internal/faultsuite), injects
// faults (fault_on.go).
func faultChannel(ch io.ReadWriter, _ *zap.Logger) io.ReadWriter { return ch }
