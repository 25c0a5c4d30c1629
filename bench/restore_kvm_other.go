//go:build !linux

package bench

import (
	"context"
	"errors"

	"github.com/themisfs/themis/vmm/kvm"
)

// measureKVM needs /dev/kvm: Linux only.
func measureKVM(context.Context, kvm.VMConfig, int, int) (KVMRestore, armSample, error) {
	return KVMRestore{}, armSample{}, errors.ErrUnsupported
}
