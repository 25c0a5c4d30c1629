//go:build !linux

package kvm

import (
	"context"
	"errors"
)

// Config describes a synthetic-guest machine (see the Linux build).
type Config struct {
	MemoryBytes    int64
	DirtyRing      bool
	DirtyRingBytes int
	NoIRQChip      bool
}

// Machine is unavailable off Linux.
type Machine struct{}

// New returns errors.ErrUnsupported off Linux.
func New(Config) (*Machine, error) { return nil, errors.ErrUnsupported }

// Close implements io.Closer.
func (*Machine) Close() error { return nil }

// Run returns errors.ErrUnsupported off Linux.
func (*Machine) Run(context.Context) error { return errors.ErrUnsupported }
