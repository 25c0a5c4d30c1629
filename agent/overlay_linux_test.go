package agent

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/oracle"
)

func TestCheckMountOptions(t *testing.T) {
	t.Parallel()
	ov := func(opts string) *agentv1.Mount {
		return &agentv1.Mount{Lane: "ov", Device: "serial:lane0", LowerDevice: "serial:lower0", Fstype: "overlay", Options: opts}
	}
	tests := []struct {
		name string
		m    *agentv1.Mount
		want string // substring of the error; "" means accepted
	}{
		{"overlay plain", ov(""), ""},
		{"overlay metacopy off", ov("metacopy=off,redirect_dir=off,index=off"), ""},
		{"overlay metacopy on", ov("redirect_dir=on,metacopy=on"), "would record empty files"},
		{"overlay metacopy bare", ov("metacopy"), "metacopy"},
		{"overlay own lowerdir", ov("lowerdir=/x"), "sets lowerdir"},
		{"overlay own workdir", ov("noatime,workdir=/x"), "sets workdir"},
		{"overlay without lower", &agentv1.Mount{Lane: "ov", Device: "serial:lane0", Fstype: "overlay"}, "no lower_device"},
		{"ext2 with lower", &agentv1.Mount{Lane: "e", Device: "serial:lane0", Fstype: "ext2", LowerDevice: "serial:lower0"}, "for overlay lanes"},
		{"ext2 with layer fstype", &agentv1.Mount{Lane: "e", Device: "serial:lane0", Fstype: "ext2", LayerFstype: "ext2"}, "for overlay lanes"},
		{"ext2 metacopy on", &agentv1.Mount{Lane: "e", Device: "serial:lane0", Fstype: "ext2", Options: "metacopy=on"}, "metacopy"},
		{"ext2 plain", &agentv1.Mount{Lane: "e", Device: "serial:lane0", Fstype: "ext2", Options: "noatime"}, ""},
	}
	for _, tt := range tests {
		err := checkMountOptions(tt.m)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		case tt.want != "" && !errors.Is(err, unix.EINVAL):
			t.Errorf("%s: %v, want EINVAL", tt.name, err)
		}
	}
}

func TestOverlayData(t *testing.T) {
	t.Parallel()
	tests := []struct{ opts, want string }{
		{"", "lowerdir=/l,upperdir=/u/upper,workdir=/u/work,metacopy=off"},
		{"redirect_dir=off,index=off", "lowerdir=/l,upperdir=/u/upper,workdir=/u/work,redirect_dir=off,index=off,metacopy=off"},
		{"metacopy=off", "lowerdir=/l,upperdir=/u/upper,workdir=/u/work,metacopy=off"},
	}
	for _, tt := range tests {
		if got := overlayData("/l", "/u/upper", "/u/work", tt.opts); got != tt.want {
			t.Errorf("overlayData(%q) = %q, want %q", tt.opts, got, tt.want)
		}
	}
}

// TestMountOverlayHost mounts an overlay lane with the host's kernel over
// two loop-mounted ext2 images and checks the markers the kernel writes, as
// seen from below: a whiteout for an unlinked lower file, an opaque marker
// for a lower directory removed and made again. The QEMU test in session
// checks the same on the guest's kernel.
func TestMountOverlayHost(t *testing.T) {
	lowerDev, upperDev := loopImage(t), loopImage(t)
	dir := t.TempDir()
	s := &Server{Root: filepath.Join(dir, "lanes"), Layers: filepath.Join(dir, "layers"), Machine: true}
	do := func(req *agentv1.Request) *agentv1.Response {
		t.Helper()
		return must(t, s, req)
	}
	mountReq := func(m *agentv1.Mount) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Mount{Mount: m}}
	}
	umountReq := func(l string) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: l}}}
	}
	on := func(l string, req *agentv1.Request) *agentv1.Request { // sets the lane of a lane op
		switch o := req.GetOp().(type) {
		case *agentv1.Request_Create:
			o.Create.Lane = l
		case *agentv1.Request_Mkdir:
			o.Mkdir.Lane = l
		case *agentv1.Request_Unlink:
			o.Unlink.Lane = l
		case *agentv1.Request_Rmdir:
			o.Rmdir.Lane = l
		}
		return req
	}
	// The lower layer's content, made before the overlay is mounted.
	do(mountReq(&agentv1.Mount{Lane: "seed", Device: lowerDev, Fstype: "ext2"}))
	do(on("seed", create("f")))
	do(on("seed", mkdir("d")))
	do(on("seed", create("d/g")))
	do(umountReq("seed"))

	const ov = "ov"
	mc := &agentv1.Mount{Lane: ov, Device: upperDev, LowerDevice: lowerDev, Fstype: "overlay", Options: "metacopy=on"}
	if r := s.Handle(mountReq(mc)); errnoOf(r) != unix.EINVAL || !strings.Contains(r.GetError(), "empty files") {
		t.Fatalf("mount with metacopy=on: errno %v (%s), want EINVAL naming empty files", errnoOf(r), r.GetError())
	}
	do(mountReq(&agentv1.Mount{Lane: ov, Device: upperDev, LowerDevice: lowerDev, Fstype: "overlay", Options: "redirect_dir=off,index=off"}))
	mounted := true
	t.Cleanup(func() {
		if mounted {
			if r := s.Handle(umountReq(ov)); r.GetErrno() != 0 {
				t.Errorf("cleanup umount: %s", r.GetError())
			}
		}
	})
	do(on(ov, unlink("f")))
	do(on(ov, unlink("d/g")))
	do(on(ov, rmdir("d")))
	do(on(ov, mkdir("d")))

	below := func() *agentv1.FingerprintResult {
		return do(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: ov, Leaves: true, Below: true}}}).GetFingerprint()
	}
	merged := func() *agentv1.FingerprintResult {
		return do(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: ov, Leaves: true}}}).GetFingerprint()
	}
	b := below()
	for _, e := range b.GetLeaves() {
		t.Logf("from below: %q %v mode %o", e.GetPath(), e.GetKind(), e.GetMode())
	}
	var marks []string
	for _, e := range b.GetLeaves() {
		if c := oracle.ParseSymbolic(e); c.Marker != oracle.MarkerNone {
			marks = append(marks, c.Marker.String()+" "+c.Target)
		}
	}
	if want := []string{"opaque d", "whiteout f"}; !slices.Equal(marks, want) {
		t.Errorf("markers from below: %q, want %q (leaves %v)", marks, want, b.GetLeaves())
	}
	// The kernel's whiteout is a character device 0:0 in the upper directory.
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(s.upperDir(ov), "f"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("upper f: mode %o rdev %d, %v; want a character device 0:0", st.Mode, st.Rdev, err)
	}
	var paths []string
	for _, e := range merged().GetLeaves() {
		paths = append(paths, e.GetPath())
	}
	if want := []string{"", "d", "lost+found"}; !slices.Equal(paths, want) {
		t.Errorf("merged view: %q, want %q", paths, want)
	}

	// Umount unmounts the layers too; a remount brings back the same views.
	before, beforeBelow := merged().GetRoot(), b.GetRoot()
	do(umountReq(ov))
	mounted = false
	if _, err := os.Stat(s.upperDir(ov)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upper directory after umount: %v, want the upper layer unmounted", err)
	}
	if r := s.Handle(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: ov, Below: true}}}); errnoOf(r) != unix.ENOENT {
		t.Errorf("below on an unmounted lane: errno %v (%s)", errnoOf(r), r.GetError())
	}
	do(mountReq(&agentv1.Mount{Lane: ov}))
	mounted = true
	if !bytes.Equal(merged().GetRoot(), before) || !bytes.Equal(below().GetRoot(), beforeBelow) {
		t.Error("roots changed across umount+mount")
	}
	do(mountReq(&agentv1.Mount{Lane: "plain", Device: lowerDev, Fstype: "ext2", ReadOnly: true}))
	t.Cleanup(func() { s.Handle(umountReq("plain")) })
	if r := s.Handle(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: "plain", Below: true}}}); errnoOf(r) != unix.EINVAL {
		t.Errorf("below on a plain lane: errno %v (%s), want EINVAL", errnoOf(r), r.GetError())
	}
}
