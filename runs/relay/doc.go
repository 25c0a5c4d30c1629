// Package relay lets a run outlive its guest: a run that leases one
// session after another (Chain) when the guest's kernel crashes, hangs or
// dies under it, and the reading of such a death (Of): the kernel's report
// when the console holds one (internal/kreport, from vmm.GuestDiedError),
// a hang (no answer within the call's bound) or a plain death.
//
// The crash path (runs/crashcheck), clock sweeps (runs/clocksweep) and
// corruption (runs/belowfs) use it: a crash state, cell or flipped bit
// that kills the guest gets that death as its verdict, and the run goes on
// in a fresh session (Chain.Replace) that rebuilds what the dead one held.
// Each starts through Start, the one run prologue: a scratch dir of its
// own (internal/scratch) and the chain's first session.
package relay
