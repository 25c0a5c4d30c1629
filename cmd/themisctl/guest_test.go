package main

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest"
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
		{[]string{"guest", "list", "--json"}, `"schema": "themis.v1.GuestImageList"`, false},
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

// TestGuestJSON: guest build (of a prebuilt image, $THEMIS_GUEST_IMAGE)
// and guest list print their themis.v1 messages.
func TestGuestJSON(t *testing.T) {
	bin := themisctl(t)
	cache := t.TempDir()
	dir := filepath.Join(cache, "images", "k1")
	entry := func(b string) map[string]any {
		sum := blake3.Sum256([]byte(b))
		return map[string]any{"size": len(b), "blake3": hex.EncodeToString(sum[:])}
	}
	manifest, err := json.Marshal(map[string]any{"format": "themis-guest-image/v1", "key": "k1", "kernel_version": "6.1.0-test",
		"modules": []string{"virtio_blk"}, "kernel": entry("kernel"), "initramfs": entry("initramfs"), "flavor": "custom"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{guest.KernelFile: "kernel", guest.InitramfsFile: "initramfs", guest.ManifestFile: string(manifest)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(env string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "THEMIS_CACHE_DIR="+cache, env)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("themisctl %v: %v", args, err)
		}
		return out
	}
	var img themisv1.CachedGuestImage
	out := run(guest.PrebuiltEnv+"="+dir, "--json", "guest", "build")
	if err := jsonout.DecodeInto(out, &img); err != nil {
		t.Fatalf("guest build --json: %v\n%s", err, out)
	}
	if img.GetImage().GetKey() != "k1" || img.GetImage().GetKernelVersion() != "6.1.0-test" || img.GetKernel() != filepath.Join(dir, guest.KernelFile) ||
		!img.GetCached() || len(img.GetModules()) != 1 {
		t.Errorf("guest build --json: %s", out)
	}
	var list themisv1.GuestImageList
	out = run("", "--json", "guest", "list")
	if err := jsonout.DecodeInto(out, &list); err != nil {
		t.Fatalf("guest list --json: %v\n%s", err, out)
	}
	if imgs := list.GetImages(); len(imgs) != 1 || imgs[0].GetImage().GetKey() != "k1" || imgs[0].GetImage().GetFlavor() != "custom" ||
		imgs[0].GetBuilt().AsTime().IsZero() {
		t.Errorf("guest list --json: %s", out)
	}
}
