// Package scratchtest gives tests a small scratch file system of their own
// (a tmpfs of a few MiB), to see what the daemon does when the scratch dir
// (/dev/shm, where guest RAM lives) is full, without filling the host's.
//
// Mounting needs root (CAP_SYS_ADMIN); elsewhere the tests skip, saying
// why. Each mount is unmounted in the test's cleanup. It imports nothing
// of Themis.
package scratchtest
