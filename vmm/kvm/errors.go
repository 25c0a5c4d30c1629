package kvm

import (
	"errors"
	"fmt"
)

// IoctlError is a failed ioctl, named by its kernel name.
type IoctlError struct {
	// Op is the ioctl's name, e.g. "KVM_GET_XSAVE".
	Op string
	// Err is the errno (a syscall.Errno).
	Err error
}

func (e *IoctlError) Error() string { return fmt.Sprintf("kvm: %s: %v", e.Op, e.Err) }

// Unwrap returns the errno.
func (e *IoctlError) Unwrap() error { return e.Err }

// Sentinel errors.
var (
	// ErrPaused is wrapped by Run's error when Pause or the context stopped the vCPU.
	ErrPaused = errors.New("kvm: vcpu paused")
	// ErrGuestFault is wrapped by Run's error when the guest did something this
	// VMM cannot serve (triple fault, unknown port, MMIO, emulation failure).
	// The machine stays usable: Restore returns it to a checkpoint.
	ErrGuestFault = errors.New("kvm: guest fault")
	// ErrRingOverflow: the dirty ring filled up completely, so dirty pages
	// may have been lost; the machine's memory tracking can no longer be
	// trusted (Close it). Use a larger VMConfig.DirtyRingBytes.
	ErrRingOverflow = errors.New("kvm: dirty ring overflowed")
	// ErrTooLarge is returned by New for guest RAM above MaxMemory.
	ErrTooLarge = errors.New("kvm: guest RAM too large")
)

// ExitError is a vCPU exit this VMM does not serve, or a pause. It names the
// exit reason and the guest RIP.
type ExitError struct {
	// Reason is the KVM exit reason, e.g. "SHUTDOWN", or "PAUSED".
	Reason string
	// RIP is the guest instruction pointer at the exit.
	RIP uint64
	// Detail says more (port, address, suberror, cause of the pause).
	Detail string
	// Err is ErrGuestFault or ErrPaused, possibly joined with a context error.
	Err error
}

func (e *ExitError) Error() string {
	s := fmt.Sprintf("kvm: vcpu exit %s at RIP %#x", e.Reason, e.RIP)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel (and context error) behind the exit.
func (e *ExitError) Unwrap() error { return e.Err }
