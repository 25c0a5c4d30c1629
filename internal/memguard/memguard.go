package memguard

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrFault is wrapped by Run's error when its function faulted.
var ErrFault = errors.New("memguard: memory fault")

// addrError is the runtime's panic value for a fault at an address
// (runtime.errorAddressString) under SetPanicOnFault.
type addrError interface {
	error
	RuntimeError()
	Addr() uintptr
}

// Run calls fn with panic-on-fault set for the calling goroutine and
// returns an error wrapping ErrFault, naming the faulting address, if a
// memory access of fn faulted; what fn did before the fault stays done.
// Any other panic propagates. fn must not start goroutines that touch the
// mapping: they are not guarded.
func Run(fn func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if ae, ok := r.(addrError); ok && ae.Addr() != 0 {
			err = fmt.Errorf("%w at %#x: %v", ErrFault, ae.Addr(), ae)
			return
		}
		panic(r)
	}()
	fn()
	return nil
}
