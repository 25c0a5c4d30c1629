package kvmtest

import (
	"os"
	"testing"
)

// Device is the KVM device node the tests open.
const Device = "/dev/kvm"

// RequireEnv names the variable that turns a missing /dev/kvm from a skip
// into a failure.
const RequireEnv = "THEMIS_REQUIRE_KVM"

// Need skips t when the host has no /dev/kvm, or fails it when RequireEnv
// is 1.
func Need(t testing.TB) {
	t.Helper()
	if why, ok := missing(); ok {
		if Required() {
			t.Fatalf("%s is required under %s=1: %s", Device, RequireEnv, why)
		}
		t.Skipf("skipped: %s (set %s=1 to fail instead)", why, RequireEnv)
	}
}

// Required reports whether RequireEnv asks for /dev/kvm.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// missing says why /dev/kvm cannot be used, if it cannot.
func missing() (string, bool) {
	if _, err := os.Stat(Device); err != nil {
		return "no " + Device + ": this host offers no KVM (" + err.Error() + ")", true
	}
	return "", false
}
