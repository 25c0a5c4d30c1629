//go:build themisfault

package main

import (
	"io"

	"go.uber.org/zap"

	"github.com/themisfs/themis/internal/faultagent"
)

// faultChannel wraps the agent's channel so that the host can arm faults
// through it (internal/faultagent): this is the fault suite's agent, built
// with -tags themisfault.
func faultChannel(ch io.ReadWriter, log *zap.Logger) io.ReadWriter {
	log.Warn("fault injection built in (themisfault): not a production agent")
	return faultagent.Wrap(ch, faultagent.Options{Log: log.Named("fault")})
}
