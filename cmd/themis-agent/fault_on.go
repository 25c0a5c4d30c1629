//go:build themisfault

package main

import (
	"io"

	"go.uber.org/zap"

	"github.com/themisfs/themis/internal/faultagent"
)

// crashOn is faultagent.Options.CrashOn, set at link time (-ldflags
// "-X main.crashOn=mkdir:d-01"): the requests on which the kernel crashes.
var crashOn string

// faultChannel wraps the agent's channel so that the host can arm faults
// through it (internal/faultagent): this is the fault suite's agent, built
// with -tags themisfault.
func faultChannel(ch io.ReadWriter, log *zap.Logger) io.ReadWriter {
	log.Warn("fault injection built in (themisfault): not a production agent", zap.String("crash_on", crashOn))
	c := faultagent.CrashOn(crashOn)
	if err := c.Check(); err != nil {
		log.Error("crash on ignored", zap.Error(err))
		c = ""
	}
	return faultagent.Wrap(ch, faultagent.Options{Log: log.Named("fault"), CrashOn: c})
}
