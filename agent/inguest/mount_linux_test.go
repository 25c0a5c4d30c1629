package inguest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// loopImage makes a small ext2 image attached to a loop device, or skips.
func loopImage(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	for _, tool := range []string{"mkfs.ext2", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "ext2.img")
	if out, err := exec.Command("mkfs.ext2", "-q", "-F", img, "4M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext2: %v\n%s", err, out)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

func TestMountUmount(t *testing.T) {
	t.Parallel()
	dev := loopImage(t)
	s, _ := newServer(t)
	s.Machine = true
	mount := func(m *agentv1.Mount) *agentv1.Response {
		return s.Handle(&agentv1.Request{Op: &agentv1.Request_Mount{Mount: m}})
	}
	umount := func(l string) *agentv1.Response {
		return s.Handle(&agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: l}}})
	}
	const l = "ext2"
	if r := mount(&agentv1.Mount{Lane: l, Device: dev, Fstype: "ext2", Options: "noatime,errors=remount-ro"}); r.GetErrno() != 0 {
		t.Fatalf("mount: %s", r.GetError())
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			if err := unix.Unmount(s.lanePath(l), 0); err != nil {
				t.Errorf("cleanup unmount: %v", err)
			}
		}
	})
	if r := mount(&agentv1.Mount{Lane: l}); errnoOf(r) != unix.EBUSY {
		t.Errorf("second mount: errno %v (%s)", errnoOf(r), r.GetError())
	}
	p := must(t, s, &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}).GetPing()
	if !slices.Contains(p.GetLanes(), l) {
		t.Errorf("ping lanes = %v", p.GetLanes())
	}
	mk := &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: l, Path: "d", Mode: 0o755}}}
	must(t, s, mk)
	fpReq := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: l, Leaves: true}}}
	before := must(t, s, fpReq).GetFingerprint()
	if before.GetEntries() != 3 { // "", d, lost+found
		t.Errorf("entries = %d, want 3", before.GetEntries())
	}
	if r := umount(l); r.GetErrno() != 0 {
		t.Fatalf("umount: %s", r.GetError())
	}
	mounted = false
	if r := s.Handle(mk); errnoOf(r) != unix.ENOENT {
		t.Errorf("mkdir on unmounted lane: errno %v (%s)", errnoOf(r), r.GetError())
	}
	if r := umount(l); errnoOf(r) != unix.EINVAL {
		t.Errorf("second umount: errno %v (%s)", errnoOf(r), r.GetError())
	}
	// Mount with only the lane remounts the same device.
	if r := mount(&agentv1.Mount{Lane: l}); r.GetErrno() != 0 {
		t.Fatalf("remount: %s", r.GetError())
	}
	mounted = true
	after := must(t, s, fpReq).GetFingerprint()
	if string(after.GetRoot()) != string(before.GetRoot()) {
		t.Errorf("root changed across umount+mount")
	}
	if r := umount(l); r.GetErrno() != 0 {
		t.Fatalf("umount: %s", r.GetError())
	}
	mounted = false
}

func TestDropCachesLevel(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	s.Machine = true
	for _, level := range []uint32{0, 4} {
		r := s.Handle(&agentv1.Request{Op: &agentv1.Request_DropCaches{DropCaches: &agentv1.DropCaches{Level: level}}})
		if errnoOf(r) != unix.EINVAL {
			t.Errorf("level %d: errno %v (%s)", level, errnoOf(r), r.GetError())
		}
	}
}
