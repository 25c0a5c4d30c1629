//go:build themisfault

package session

import (
	"fmt"
	"os"
)

// A daemon built with -tags themisfault (the fault suite's) holds every
// finding insert mid-transaction under FaultEnv=finding-insert, so that a
// SIGKILL lands inside a ledger write (session/fault.go).
func init() {
	if os.Getenv(FaultEnv) == "finding-insert" {
		findingInsertFault = func(f *Finding) {
			if _, err := fmt.Fprintf(os.Stderr, "%s%s\n", FindingInsertHeld, f.ID); err != nil {
				panic(fmt.Sprintf("themisfault: %v", err)) // the suite waits for this line
			}
			select {} // until the process is killed
		}
	}
}
