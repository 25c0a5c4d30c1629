package longtest

import "testing"

func TestOn(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{{"1", true}, {"", false}, {"0", false}, {"true", false}} {
		t.Setenv(Env, tc.v)
		if got := On(); got != tc.want {
			t.Errorf("%s=%q: On() = %v, want %v", Env, tc.v, got, tc.want)
		}
	}
}
