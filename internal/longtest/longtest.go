package longtest

import (
	"os"
	"testing"
)

// Env is the variable that turns the long tests on.
const Env = "THEMIS_LONG_TESTS"

// On reports whether the long tests run ($THEMIS_LONG_TESTS=1).
func On() bool { return os.Getenv(Env) == "1" }

// Need skips t unless the long tests run, saying what it is and how to
// run it.
func Need(t testing.TB, what string) {
	t.Helper()
	if !On() {
		t.Skipf("%s: a long test, run with %s=1 (a step of its own in .ci/run)", what, Env)
	}
}
