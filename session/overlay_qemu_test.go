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
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/oracle"
	"github.com/themisfs/themis/vmm/qemu"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
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
	do(mount(&agentv1.Mount{Lane: ov, Device: "serial:lane1", LowerDevice: "serial:lane0", Fstype: "overlay", LayerFstype: "ext2", Options: OverlayMountOptions}))
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

// TestOverlayExploreRealGuest runs sessions and Explore with overlay lanes
// on the real guest: a session reports the root from below, a single
// overlay lane explores with its self-references (remount, e2fsck of the
// upper layer), and ext2 against overlay runs as a differential.
func TestOverlayExploreRealGuest(t *testing.T) {
	env := vmmtest.Setup(t)
	check := vmmtest.Leaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	m, err := Open(ctx, Config{StateDir: t.TempDir(), CacheDir: env.CacheDir, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		check()
	}()

	t.Run("Session", func(t *testing.T) {
		in, err := m.Create(ctx, CreateOptions{Lanes: []string{"overlay"}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Delete(ctx, in.ID)
		for _, s := range []string{"mkdir d-00 0755", "create d-00/f-00 0644", "write d-00/f-00 0 10 0x41"} {
			res, err := m.Apply(ctx, in.ID, parseOp(t, s))
			if err != nil || res[0].Errno != 0 {
				t.Fatalf("%s: %v, %v", s, res, err)
			}
		}
		fps, err := m.Fingerprint(ctx, in.ID, agentv1.TimeMode_TIME_MODE_NONE, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		fp := fps[0]
		if len(fp.BelowRoot) != 32 {
			t.Fatalf("overlay lane: root from below %x, want one", fp.BelowRoot)
		}
		// Over an empty lower layer the upper layer is the merged view
		// without the lower root's lost+found.
		var merged, below []string
		for _, e := range fp.Leaves {
			if !strings.HasPrefix(e.GetPath(), oracle.LostFound) {
				merged = append(merged, e.GetPath())
			}
		}
		for _, e := range fp.BelowLeaves {
			below = append(below, e.GetPath())
		}
		if want := []string{"", "d-00", "d-00/f-00"}; !slices.Equal(below, want) || !slices.Equal(merged, want) {
			t.Errorf("from below %q, merged %q, want %q", below, merged, want)
		}
	})

	t.Run("Single", func(t *testing.T) {
		s, err := m.Explore(ctx, ExploreOptions{Lanes: []string{"overlay"}, Depth: 1, Seed: 7, Remount: true, Fsck: true}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("overlay: %d states, %d unique, %d findings, %.1f states/s, stopped %q", s.States, s.Unique, s.Findings, s.StatesPerSec, s.Stopped)
		if s.States == 0 || s.Unique < 2 || s.Stopped != "" || len(s.BelowRoots["overlay"]) != 32 || s.CheckTime <= 0 {
			t.Errorf("summary %+v: want a complete depth-1 run with a root from below and its checks run", s)
		}
		fs, err := m.Findings(ctx, s.Session)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			t.Errorf("finding on a single overlay lane: %s %v: %s", f.Kind, f.Trace, f.Detail)
		}
		in, err := m.Get(ctx, s.Session)
		if err != nil || in.State != StateEnded || in.Reason != "explore finished" {
			t.Errorf("session after the run: %+v, %v", in, err)
		}
	})

	// ext2 against overlay: under the metis policy the roots already
	// differ (overlayfs reports nlink 1 for its merged root), which is the
	// one finding; the overlay policy leaves the root's nlink out and
	// compares past it.
	t.Run("Differential", func(t *testing.T) {
		for _, tt := range []struct {
			policy   string
			explores bool // past the root
		}{{"metis", false}, {"overlay", true}} {
			var msgs []Finding
			s, err := m.Explore(ctx, ExploreOptions{Lanes: []string{"ext2", "overlay"}, Depth: 1, Seed: 7, Policy: tt.policy}, nil,
				func(f Finding) { msgs = append(msgs, f) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("ext2,overlay under %s: %d states, %d unique, %d findings, stopped %q", tt.policy, s.States, s.Unique, s.Findings, s.Stopped)
			for _, f := range msgs {
				t.Logf("  %s %s minimized=%v %v (%s %q): %s", f.ID, f.Kind, f.Minimized, f.Trace, f.Field, f.Path, f.Detail)
			}
			if s.Stopped != "" || s.Roots["ext2"] == nil || s.Roots["overlay"] == nil || s.BelowRoots["overlay"] == nil || s.BelowRoots["ext2"] != nil {
				t.Errorf("%s: summary %+v: want a complete run, both lanes' roots and a root from below for the overlay lane only", tt.policy, s)
			}
			if tt.explores != (s.States > 0) {
				t.Errorf("%s: %d states, want exploring past the root %v", tt.policy, s.States, tt.explores)
			}
			if !tt.explores && (len(msgs) != 1 || msgs[0].Kind != explore.KindState || msgs[0].Path != "" || msgs[0].Field != "nlink") {
				t.Errorf("%s: findings %+v, want the root's nlink", tt.policy, msgs)
			}
			in, err := m.Get(ctx, s.Session)
			if err != nil || in.State != StateEnded {
				t.Errorf("%s: session after the run: %+v, %v", tt.policy, in, err)
			}
		}
	})
}

// parseOp reads an op in opspec's short form.
func parseOp(t *testing.T, short string) *agentv1.Request {
	t.Helper()
	op, err := opspec.Parse(short)
	if err != nil {
		t.Fatal(err)
	}
	req, err := opspec.Request(op)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestOverlaySeededExploreRealGuest explores overlay lanes whose lower
// layer holds seed=1's tree (f-00, f-01, d-00/f-00, the empty d-01) on the
// real guest. A single overlay lane: exploration makes whiteouts and an
// opaque directory in the upper layer, and every state's merged view equals
// lower ⊕ the upper layer seen from below (no finding). ext2:seed=1 against
// overlay:seed=1 under the overlay policy: the merged views start equal;
// what differs past the root is logged (docs/explore.md records it).
func TestOverlaySeededExploreRealGuest(t *testing.T) {
	env := vmmtest.Setup(t)
	check := vmmtest.Leaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := Open(ctx, Config{StateDir: t.TempDir(), CacheDir: env.CacheDir, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		check()
	}()
	// An opaque directory takes rmdir d-01 then mkdir d-01 among the
	// ops drawn: at depth 2 and branching 12, seeds 16 and 19 of 1..20 do
	// it. Pick another if the generator changes.
	const seed = 16
	logRun := func(t *testing.T, s *ExploreSummary, fs []Finding) {
		t.Helper()
		t.Logf("%d states, %d unique, %d findings, %.1f states/s in %s (boot %s), layers %+v",
			s.States, s.Unique, s.Findings, s.StatesPerSec, s.Elapsed.Round(time.Millisecond), s.Boot.Round(time.Millisecond), s.Layers)
		for _, f := range fs {
			t.Logf("  %s %s minimized=%v dup=%q %v (%s %q): %s", f.ID, f.Kind, f.Minimized, f.DuplicateOf, f.Trace, f.Field, f.Path, f.Detail)
		}
	}

	t.Run("Single", func(t *testing.T) {
		const lane = "overlay:seed=1"
		s, err := m.Explore(ctx, ExploreOptions{Lanes: []string{lane}, Depth: 2, Seed: seed}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := m.Findings(ctx, s.Session)
		if err != nil {
			t.Fatal(err)
		}
		logRun(t, s, fs)
		for _, f := range fs {
			t.Errorf("finding on a single seeded overlay lane: %s %v: %s", f.Kind, f.Trace, f.Detail)
		}
		c := s.Layers[lane]
		if s.Stopped != "" || s.MaxDepth != 2 || c.Checked != s.Unique {
			t.Errorf("summary %+v: want a complete depth-2 run whose every unique state was checked against lower ⊕ upper", s)
		}
		if c.Whiteouts == 0 || c.Opaque == 0 {
			t.Errorf("layers %+v: want states with whiteouts and with an opaque directory", c)
		}
		// At the root the merged view holds the lower layer's tree and the
		// upper layer only its root.
		if bytes.Equal(s.Roots[lane], s.BelowRoots[lane]) {
			t.Error("root state: the merged root equals the root from below over a seeded lower layer")
		}
	})

	// Under overlay every op that copies a lower directory up shows as its
	// nlink (overlayfs reports 1 for merged directories, ext2 counts
	// subdirectories); overlay-dirs leaves directories' nlink out.
	t.Run("Differential", func(t *testing.T) {
		lanes := []string{"ext2:seed=1", "overlay:seed=1"}
		for _, policy := range []string{"overlay", "overlay-dirs"} {
			s, err := m.Explore(ctx, ExploreOptions{Lanes: lanes, Depth: 2, Seed: seed, Policy: policy}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := m.Findings(ctx, s.Session)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("policy %s:", policy)
			logRun(t, s, fs)
			if s.Stopped != "" || s.States == 0 {
				t.Errorf("%s: summary %+v: want a complete run past the root", policy, s)
			}
			if !bytes.Equal(s.Roots[lanes[0]], s.Roots[lanes[1]]) {
				t.Errorf("%s: root state: ext2:seed=1 %x, overlay:seed=1 %x: want the merged view to start equal to the plain one", policy, s.Roots[lanes[0]], s.Roots[lanes[1]])
			}
			if s.Layers[lanes[1]].Checked == 0 {
				t.Errorf("%s: layers %+v: want the overlay lane checked against lower ⊕ upper", policy, s.Layers)
			}
			for _, f := range fs {
				if f.Kind == KindLayers || (policy == "overlay-dirs" && f.Field == "nlink") {
					t.Errorf("%s: finding %s %v (%s at %q): %s", policy, f.Kind, f.Trace, f.Field, f.Path, f.Detail)
				}
			}
		}
	})
}
