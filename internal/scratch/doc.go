// Package scratch makes the host scratch entries a daemon owns — guest RAM
// files in shared memory, per-machine work dirs — so that another process
// can tell a live one from a leftover, and sweeps the leftovers.
//
// Ownership is an flock(2): the owner holds an exclusive lock on the entry
// (a RAM file itself; a work dir's ".owner" file) for as long as it uses
// it. The kernel drops the lock when the owner's process ends, however it
// ends, so a free lock means no live process holds the entry. A pid in the
// name would not do: pids are reused, and two daemons in different pid
// namespaces (containers) may share /dev/shm. Locks on the same tmpfs inode
// are seen across namespaces.
//
// An entry is made under a staging name (".new-" and its name), locked,
// and only then renamed to its name (RENAME_NOREPLACE). Sweep removes an
// entry under its name as soon as its lock is free: its owner is gone, a
// daemon SIGKILLed a second ago too. An entry under a staging name it
// removes only once its lock is free and it is older than a grace period
// (which covers the instant between creating it and locking it); a dir
// without an ".owner" file (another tool's, or an older daemon's) is never
// removed. SweepAged removes by age alone, for temporaries that carry no
// lock (the base cache's mkfs and seed files).
//
// The package does no I/O but on the paths it is given; it logs what it
// removes through the logger it is given.
package scratch
