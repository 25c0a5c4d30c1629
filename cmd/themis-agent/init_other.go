//go:build !linux

package main

import (
	"errors"
	"os"

	"go.uber.org/zap"
)

// runInit is Linux-only.
func runInit(log *zap.Logger) {
	log.Error("cannot run as init", zap.Error(errors.ErrUnsupported))
	os.Exit(1)
}
