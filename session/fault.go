package session

// FaultEnv names a test-only fault of the session package, honoured only
// by a binary built with -tags themisfault (fault_on.go): the fault
// suite's themisd (internal/faultsuite). "finding-insert" holds every
// finding insert inside its ledger transaction, between its two inserts,
// after writing FindingInsertHeld and the finding's id to stderr, until
// the process is killed. A production build never reads it.
const FaultEnv = "THEMIS_SESSION_FAULT"

// FindingInsertHeld starts the line a themisfault daemon writes to stderr
// when it holds a finding insert (FaultEnv=finding-insert).
const FindingInsertHeld = "themisfault: finding insert held: "
