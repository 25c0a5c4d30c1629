//go:build !linux

package bench

import (
	"context"
	"errors"

	"github.com/themisfs/themis/vmm/kvm"
)

// measureKVM needs /dev/kvm: Linux only.
func measureKVM(context.Context, kvm.Config, int, int) (KVMRestore, armSample, error) {
	return KVMRestore{}, armSample{}, errors.ErrUnsupported
}
