package inguest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/opspec"
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
	// A lane named after its spec: ':' would split lowerdir.
	got := overlayData(`/layers/overlay:seed=1/lower`, `/layers/overlay:seed=1/upper/upper`, `/layers/a\b/upper/work`, "")
	if want := `lowerdir=/layers/overlay\:seed=1/lower,upperdir=/layers/overlay\:seed=1/upper/upper,workdir=/layers/a\\b/upper/work,metacopy=off`; got != want {
		t.Errorf("overlayData with ':' and '\\' = %q, want %q", got, want)
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

// TestOverlayMergeHost checks oracle.Merge against the host's kernel: an
// overlay lane over a lower layer holding a small tree, ops through the
// overlay that copy up, white out, make opaque directories and replace a
// directory by a file; after each, the merged walk must equal lower ⊕ the
// upper layer seen from below, every field (time mode ALL). The QEMU test
// in session does the same with the guest's kernel during exploration.
func TestOverlayMergeHost(t *testing.T) {
	lowerDev, upperDev := loopImage(t), loopImage(t)
	dir := t.TempDir()
	s := &Server{Root: filepath.Join(dir, "lanes"), Layers: filepath.Join(dir, "layers"), Machine: true}
	do := func(req *agentv1.Request) *agentv1.Response {
		t.Helper()
		return must(t, s, req)
	}
	op := func(l, short string) *agentv1.Request {
		t.Helper()
		o, err := opspec.Parse(short)
		if err != nil {
			t.Fatal(err)
		}
		req, err := opspec.Request(o)
		if err != nil {
			t.Fatal(err)
		}
		m := req.ProtoReflect()
		sub := m.Get(m.WhichOneof(m.Descriptor().Oneofs().ByName("op"))).Message()
		sub.Set(sub.Descriptor().Fields().ByName("lane"), protoreflect.ValueOfString(l))
		return req
	}
	mountReq := func(m *agentv1.Mount) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Mount{Mount: m}}
	}
	do(mountReq(&agentv1.Mount{Lane: "seed", Device: lowerDev, Fstype: "ext2"}))
	for _, o := range []string{
		"create f-00 0644", "write f-00 0 1000 0x55", "create f-01 0644", "write f-01 0 2000 0x41",
		"mkdir d-00 0755", "create d-00/f-00 0644", "write d-00/f-00 0 100 0x42",
		"mkdir d-01 0755", "mkdir d-02 0755", "mkdir d-02/d-00 0755", "create d-02/d-00/f-00 0644",
		"symlink f-00 s-00",
	} {
		do(op("seed", o))
	}
	do(&agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: "seed"}}})

	const ov = `overlay:seed=1\x` // named like a spec, ':' and '\' escaped in the mount data
	do(mountReq(&agentv1.Mount{Lane: ov, Device: upperDev, LowerDevice: lowerDev, Fstype: "overlay", Options: "redirect_dir=off,index=off"}))
	t.Cleanup(func() { s.Handle(&agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: ov}}}) })
	const mode = agentv1.TimeMode_TIME_MODE_ALL
	walk := func(f *agentv1.Fingerprint) []*agentv1.Entry {
		t.Helper()
		f.Lane, f.TimeMode, f.Leaves = ov, mode, true
		return do(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: f}}).GetFingerprint().GetLeaves()
	}
	if r := s.Handle(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: ov, Below: true, Lower: true}}}); errnoOf(r) != unix.EINVAL {
		t.Errorf("below and lower together: errno %v (%s), want EINVAL", errnoOf(r), r.GetError())
	}
	lower := walk(&agentv1.Fingerprint{Lower: true})
	markers := map[oracle.Marker]bool{}
	for _, step := range []string{
		"",                       // nothing yet: only the root is merged
		"chmod f-01 0600",        // copy-up
		"write f-00 500 10 0xff", // copy-up of data
		"unlink f-00",            // whiteout of a copied-up file
		"unlink s-00",            // whiteout of a lower symlink
		"create d-00/f-01 0644",  // d-00 becomes a merged directory
		"unlink d-00/f-00",       // whiteout inside it
		"rmdir d-01",             // whiteout of a directory
		"mkdir d-01 0700",        // opaque directory over it
		"rename f-01 f-02",       // whiteout of f-01, f-02 new
		"link f-02 d-01/f-00",    // a hard link in the upper layer
		"unlink d-02/d-00/f-00",  // d-02 and d-02/d-00 merged
		"rmdir d-02/d-00",        // whiteout in a merged directory
		"create d-02/d-00 0644",  // a file over the whited-out directory
		"truncate d-02/d-00 77",  // upper only
		"symlink d-00 d-02/s-00", // upper only
		"rmdir d-00",             // ENOTEMPTY: f-01 is still there
		"mkdir d-03 0755",        // new directory over nothing
		"create d-03/f-00 0644",  // inside it
	} {
		if step != "" {
			r := s.Handle(op(ov, step))
			t.Logf("%s: errno %d", step, r.GetErrno())
		}
		// Merged first, as explore walks: neither walk moves an atime (the
		// walk opens everything O_NOATIME; overlayfs opens the real
		// directories O_NOATIME and passes the flag on for files).
		merged := walk(&agentv1.Fingerprint{})
		below := walk(&agentv1.Fingerprint{Below: true})
		want := oracle.WithoutSymlinkAtime(oracle.Merge(lower, below))
		merged = oracle.WithoutSymlinkAtime(merged)
		if p, ok := oracle.FirstDiff(want, merged, mode); ok {
			var w, g *agentv1.Entry
			for _, e := range want {
				if e.GetPath() == p {
					w = e
				}
			}
			for _, e := range merged {
				if e.GetPath() == p {
					g = e
				}
			}
			t.Errorf("after %q: merged view differs from lower ⊕ upper at %q:\n lower ⊕ upper %v\n merged        %v", step, p, w, g)
		}
		for _, e := range below {
			markers[oracle.ParseSymbolic(e).Marker] = true
		}
	}
	if !markers[oracle.MarkerWhiteout] || !markers[oracle.MarkerOpaque] {
		t.Errorf("markers seen from below: %v, want whiteouts and opaque directories", markers)
	}
}
