package qemu

import (
	"os"
	"testing"
)

// TestScratchDirEnv checks that $THEMIS_SCRATCH_DIR moves the scratch dir
// and that without it the dir is /dev/shm where there is one.
func TestScratchDirEnv(t *testing.T) {
	dir := t.TempDir()
	want := os.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		want = "/dev/shm"
	}
	for _, tt := range []struct {
		name, env, want string
	}{
		{"unset", "", want},
		{"set", dir, dir},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(ScratchEnv, tt.env)
			if got := ScratchDir(); got != tt.want {
				t.Errorf("ScratchDir() with %s=%q = %q, want %q", ScratchEnv, tt.env, got, tt.want)
			}
		})
	}
}
