package launch

import (
	"context"
	"fmt"

	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm"
	"github.com/themisfs/themis/vmm/qemu"
)

// startOn boots cfg on c's backend; None (or anything else) is
// ErrNoBackend with c.Why.
func startOn(ctx context.Context, c Choice, cfg vmm.Config) (vmm.Machine, error) {
	switch c.Backend {
	case KVM:
		m, err := kvm.Start(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return m, nil
	case QEMU:
		m, err := qemu.Start(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return m, nil
	default:
		return nil, fmt.Errorf("%w: %s", ErrNoBackend, c.Why)
	}
}
