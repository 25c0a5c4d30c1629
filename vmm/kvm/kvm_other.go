//go:build !linux

package kvm

import (
	"context"
	"errors"
)

// VMConfig describes a VM (see the Linux build).
type VMConfig struct {
	MemoryBytes    int64
	DirtyRing      bool
	DirtyRingBytes int
	NoIRQChip      bool
}

// VM is unavailable off Linux.
type VM struct{}

// NewVM returns errors.ErrUnsupported off Linux.
func NewVM(VMConfig) (*VM, error) { return nil, errors.ErrUnsupported }

// Close implements io.Closer.
func (*VM) Close() error { return nil }

// Run returns errors.ErrUnsupported off Linux.
func (*VM) Run(context.Context) error { return errors.ErrUnsupported }
