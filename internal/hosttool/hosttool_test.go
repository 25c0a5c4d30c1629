package hosttool

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestPackage(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"mkfs.ext2": "e2fsprogs", "mkfs.ext4": "e2fsprogs", "e2fsck": "e2fsprogs", "debugfs": "e2fsprogs",
		"mkfs.vfat": "dosfstools", "mkfs.btrfs": "btrfs-progs", "btrfs": "btrfs-progs", "apt-get": "apt", "dpkg-deb": "dpkg", "xz": "xz-utils",
		"qemu-img": "qemu-img",
	}
	for tool, want := range tests {
		if got := Package(tool); got != want {
			t.Errorf("Package(%q) = %q, want %q", tool, got, want)
		}
	}
}

func TestLookMissing(t *testing.T) {
	t.Parallel()
	_, err := Look("mkfs.nonesuch-fs")
	if err == nil || !strings.Contains(err.Error(), "install the Debian package mkfs.nonesuch-fs") {
		t.Errorf("Look: err = %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	out, err := Run(ctx, "", "sh", "-c", "echo out; echo oops >&2; exit 3")
	var te *Error
	if !errors.As(err, &te) || te.Stderr != "oops" || !strings.Contains(err.Error(), "exit status 3: oops") {
		t.Fatalf("Run = %q, %v; want an *Error with stderr oops", out, err)
	}
	if got := Unwrap(err).Error(); got != "oops" {
		t.Errorf("Unwrap = %q, want oops", got)
	}
	if _, err := Run(ctx, "", "sh", "-c", "echo only-stdout; exit 1"); !errors.As(err, &te) || te.Stderr != "only-stdout" {
		t.Errorf("Run with stdout only: %v, want stdout as the message", err)
	}
	sh, err := Look("sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := RunEnv(ctx, "", []string{"X=1"}, sh, "-c", `test "$X" = 1 && test -z "$HOME"`); err != nil {
		t.Errorf("RunEnv: %v (the environment is exactly env)", err)
	}
	got, err := Output(ctx, "", nil, sh, "-c", "echo a; echo b >&2")
	if err != nil || got != "a\nb\n" {
		t.Errorf("Output = %q, %v; want stdout and stderr together", got, err)
	}
}
