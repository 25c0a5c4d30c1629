package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGuestCLI runs guest list on an empty cache and guest build with
// input it must refuse before building anything.
func TestGuestCLI(t *testing.T) {
	bin := themisctl(t)
	patch := filepath.Join(t.TempDir(), "bad.patch")
	if err := os.WriteFile(patch, []byte("--- a/include/linux/fs.h\n+++ b/include/linux/fs.h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		want    string
		wantErr bool
	}{
		{[]string{"guest", "list"}, "KEY  NAME  KERNEL  FLAVOR  PATCHES  BUILT", false},
		{[]string{"guest", "list", "--json"}, "[]", false},
		{[]string{"guest", "build", "--name", "a/b"}, `image name "a/b"`, true},
		{[]string{"guest", "build", "--patch", patch}, "include/linux/fs.h is not under fs/<dir>/", true},
		{[]string{"guest", "build", "--patch", "/nonexistent.patch"}, "no such file", true},
	}
	for _, tt := range tests {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = append(os.Environ(), "THEMIS_CACHE_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if (err != nil) != tt.wantErr || !strings.Contains(string(out), tt.want) {
			t.Errorf("themisctl %v: %v: %s\nwant error %v and %q", tt.args, err, out, tt.wantErr, tt.want)
		}
	}
}
