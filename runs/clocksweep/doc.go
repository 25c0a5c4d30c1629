// Package clocksweep is the clock as a search axis (the paper's Table 8,
// Y2038): it leases a session (session.Manager.Acquire) and, for every
// value of a clock.Plan and every op, restores a root checkpoint, sets the
// guest clock, runs the op and reads the timestamp back three ways — as the
// guest sees it, as the disk stores it (the lane's image parsed on the
// host) and after a remount — giving each lane's cell a verdict; shard 0
// adds the clamped-versus-representable contrast.
//
// A lane whose op (or a read after it) kills the guest gets the death as
// its cell's verdict (kernel-crash with the kernel's report; package
// relay), and the sweep goes on in a fresh session: the cell again for
// the lanes left, then the next cells.
package clocksweep
