//go:build !linux

package echo

import (
	"context"
	"errors"

	"go.uber.org/zap"
)

// Measure returns errors.ErrUnsupported off Linux.
func Measure(context.Context, Config, *zap.Logger) (Result, error) {
	return Result{}, errors.ErrUnsupported
}
