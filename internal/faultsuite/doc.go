// Package faultsuite is the fault suite of issue 14 (a long test:
// $THEMIS_LONG_TESTS=1, internal/longtest): in one `go test` run
// it does to a daemon, with real QEMU guests, what a hung, hostile or huge
// guest and a careless client can do — SIGSTOP and SIGKILL a session's
// QEMU mid-call, an agent that replies garbage, oversized frames, stale
// ids, negative sizes and an endless log (the themisfault agent,
// internal/faultagent), a client that never reads its Explore stream,
// SIGTERM and SIGKILL to a themisd process mid-explore (and, built with
// -tags themisfault, inside a finding's ledger insert) and its restart
// (the ledger's integrity_check, the killed daemon's leftovers swept at
// once), ENOSPC on the state dir (the ledger), on /dev/shm and on the
// temp dir of a crash run (before its image copy, and inside a journal
// replay after it), a crash image stream never read, a crash
// run's host fsck past its time or killed, create and delete
// cycles (8; 50 in CI's long-tests step, $THEMIS_FAULT_CYCLES) — and after each checks that the daemon answers, that a
// bystander session answers within a second, and that the QEMU processes,
// the daemon's other descendants, its fds and the entries of its scratch and temp dirs are back
// to their baseline. docs/reliability.md ("The fault suite") has what it
// measured.
//
// The suite is its tests (TestFaultSuite, a table of cases: one more case
// is one more row and one function); this file and census.go are what
// they count with. To count only what the suite's own daemons leave while
// other packages' tests run their guests beside it, TestMain points
// $THEMIS_SCRATCH_DIR (qemu.ScratchEnv) and $TMPDIR at private dirs, named
// so that no daemon's startup sweep of themis-* entries reaches them:
// QEMU processes are those whose command line names that scratch dir.
//
// It skips in -short mode and where there is no QEMU or guest image
// (vmmtest.Setup), and fails under CI=true without them.
package faultsuite
