package session

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/vmm/qemu"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestOverlayMarkersRealGuest mounts an overlay lane in the real guest
// (QEMU, Debian's kernel) over two ext2 disks and checks, from below, the
// markers the guest's kernel wrote itself: unlinking a lower file leaves a
// whiteout (a character device 0:0 in the upper directory), and a lower
// directory removed and made again through the overlay is opaque. A mount
// asking for metacopy=on is refused with the reason.
func TestOverlayMarkersRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lower, upper := env.Lane(t, "ext2"), env.Lane(t, "ext2") // serials lane0, lane1; closed by env's cleanup
	check := vmmtest.Leaks(t)
	mach, err := qemu.Start(ctx, env.Config(t, lower, upper))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := mach.Close(); err != nil {
			t.Error(err)
		}
		check()
	}()
	do := func(req *agentv1.Request) *agentv1.Response { t.Helper(); return vmmtest.Do(t, mach, req) }
	call := func(req *agentv1.Request) *agentv1.Response {
		t.Helper()
		resp, err := mach.Call(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	mount := func(m *agentv1.Mount) *agentv1.Request { return &agentv1.Request{Op: &agentv1.Request_Mount{Mount: m}} }
	umount := func(l string) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: l}}}
	}
	op := func(lane, spec string) *agentv1.Request {
		t.Helper()
		req := parseOp(t, spec)
		kind, _, err := validateOp(req)
		if err != nil {
			t.Fatal(err)
		}
		return withLane(req, kind, lane)
	}
	fingerprint := func(lane string, below bool) *agentv1.FingerprintResult {
		t.Helper()
		return do(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, Leaves: true, Below: below}}}).GetFingerprint()
	}

	// The lower layer's content, made through a plain mount before the
	// overlay exists.
	do(mount(&agentv1.Mount{Lane: "seed", Device: "serial:lane0", Fstype: "ext2"}))
	for _, s := range []string{"create f-00 0644", "write f-00 0 100 0x55", "mkdir d-00 0755", "create d-00/f-00 0644"} {
		do(op("seed", s))
	}
	do(umount("seed"))

	const ov = "ov"
	refused := call(mount(&agentv1.Mount{Lane: ov, Device: "serial:lane1", LowerDevice: "serial:lane0", Fstype: "overlay", Options: "metacopy=on"}))
	if syscall.Errno(refused.GetErrno()) != syscall.EINVAL || !strings.Contains(refused.GetError(), "metacopy=on") || !strings.Contains(refused.GetError(), "empty files") {
		t.Errorf("mount with metacopy=on: errno %d %q, want EINVAL saying it would record empty files", refused.GetErrno(), refused.GetError())
	}
	do(mount(&agentv1.Mount{Lane: ov, Device: "serial:lane1", LowerDevice: "serial:lane0", Fstype: "overlay", LayerFstype: "ext2", Options: launch.OverlayMountOptions}))
	before := fingerprint(ov, true)
	if len(before.GetLeaves()) != 1 || before.GetLeaves()[0].GetPath() != "" {
		t.Errorf("fresh upper layer from below: %v, want only its root", before.GetLeaves())
	}

	do(op(ov, "unlink f-00"))
	do(op(ov, "unlink d-00/f-00"))
	do(op(ov, "rmdir d-00"))
	do(op(ov, "mkdir d-00 0755"))

	b := fingerprint(ov, true)
	var marks []string
	for _, e := range b.GetLeaves() {
		t.Logf("from below: %q %v", e.GetPath(), e.GetKind())
		if c := oracle.ParseSymbolic(e); c.Marker != oracle.MarkerNone {
			marks = append(marks, c.Marker.String()+" "+c.Target)
		}
	}
	if want := []string{"opaque d-00", "whiteout f-00"}; !slices.Equal(marks, want) {
		t.Errorf("markers from below %q, want %q", marks, want)
	}
	var merged []string
	for _, e := range fingerprint(ov, false).GetLeaves() {
		merged = append(merged, e.GetPath())
	}
	if want := []string{"", "d-00", "lost+found"}; !slices.Equal(merged, want) {
		t.Errorf("merged view %q, want %q", merged, want)
	}

	// The markers are the kernel's own dialect: seen through a plain
	// mount of the upper disk, f-00 is a character device 0:0 and no AUFS
	// file marks d-00 opaque.
	do(umount(ov))
	do(mount(&agentv1.Mount{Lane: "up", Device: "serial:lane1", Fstype: "ext2", ReadOnly: true}))
	st := do(&agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: "up", Path: "upper/f-00"}}}).GetStat()
	if st.GetKind() != agentv1.Kind_KIND_CHAR_DEVICE || st.GetRdev() != 0 {
		t.Errorf("upper/f-00: %v rdev %d, want a character device 0:0 (kernel whiteout)", st.GetKind(), st.GetRdev())
	}
	if c := oracle.Classify(&agentv1.Entry{Path: "f-00", Kind: st.GetKind()}, st.GetRdev(), nil); c.Marker != oracle.MarkerWhiteout || c.Dialect != oracle.DialectKernel {
		t.Errorf("upper/f-00 classifies as %v (%v), want a kernel whiteout", c.Marker, c.Dialect)
	}
	aufs := call(&agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: "up", Path: "upper/d-00/" + oracle.AUFSOpaque}}})
	if syscall.Errno(aufs.GetErrno()) != syscall.ENOENT {
		t.Errorf("upper/d-00/%s: errno %d, want ENOENT (the kernel marks opaque with an xattr)", oracle.AUFSOpaque, aufs.GetErrno())
	}
	do(umount("up"))

	// A remount brings back the same views; a plain lane has nothing below.
	do(mount(&agentv1.Mount{Lane: ov}))
	if after := fingerprint(ov, true); !bytes.Equal(after.GetRoot(), b.GetRoot()) {
		t.Error("root from below changed across umount+mount")
	}
	do(mount(&agentv1.Mount{Lane: "plain", Device: "serial:lane0", Fstype: "ext2", ReadOnly: true}))
	plain := call(&agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: "plain", Below: true}}})
	if err := agent.ResponseError(plain); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("from below on a plain lane: %v, want EINVAL", err)
	}
}

// parseOp reads an op in opspec's short form.
func parseOp(t *testing.T, short string) *agentv1.Request {
	t.Helper()
	req, err := opspec.ParseRequest(short)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
