// Package sessiontest holds the test double of a session's machine and a
// Manager that boots it, for the tests of session and of the runs over it.
// The double is for control flow only (validation, limits, pools, ledger,
// a run's bookkeeping): it proves nothing about the kernel; the real guest
// is exercised by the *_qemu_test.go tests.
package sessiontest
