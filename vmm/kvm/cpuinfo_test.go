package kvm

import "testing"

func TestHardwareVirtualization(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"processor\t: 0\nflags\t\t: fpu vme vmx sse\n", true},
		{"flags\t\t: fpu svm\n", true},
		{"flags\t\t: fpu sse2 hypervisor\n", false},
		{"processor: 0\n", false},
	}
	for _, tc := range tests {
		if got, why := hardwareVirtualization([]byte(tc.in)); got != tc.want || why == "" {
			t.Errorf("%q: got %v (%s), want %v", tc.in, got, why, tc.want)
		}
	}
	ok, why := HardwareVirtualization()
	t.Logf("this host: %v (%s)", ok, why)
}
