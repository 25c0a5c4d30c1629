package main

import (
	"slices"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestFullTrace: a crash finding's footprint runs its setup (the search's
// path) before its trace; any other finding's trace is whole.
func TestFullTrace(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		f    *themisv1.Finding
		want []string
	}{
		{"divergence", &themisv1.Finding{Trace: []string{"mkdir d 0755", "rmdir d"}}, []string{"mkdir d 0755", "rmdir d"}},
		{"crash", &themisv1.Finding{Trace: []string{"fsync d"}, Crash: &themisv1.CrashPoint{Setup: []string{"mkdir d 0755"}}}, []string{"mkdir d 0755", "fsync d"}},
	} {
		if got := fullTrace(tt.f); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
