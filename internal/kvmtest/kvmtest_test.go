package kvmtest

import (
	"os"
	"testing"
)

// TestMissingMatchesHost: missing agrees with a stat of /dev/kvm, both
// ways, so Need can neither skip on a host that has it nor run without it.
func TestMissingMatchesHost(t *testing.T) {
	_, statErr := os.Stat(Device)
	why, gone := missing()
	if gone != (statErr != nil) {
		t.Fatalf("missing() = %v, but stat %s: %v", gone, Device, statErr)
	}
	if gone && why == "" {
		t.Fatal("missing() gave no reason")
	}
}

func TestRequired(t *testing.T) {
	for _, tt := range []struct {
		val  string
		want bool
	}{{"1", true}, {"", false}, {"0", false}, {"true", false}} {
		t.Setenv(RequireEnv, tt.val)
		if got := Required(); got != tt.want {
			t.Errorf("%s=%q: Required() = %v, want %v", RequireEnv, tt.val, got, tt.want)
		}
	}
}
