package exploration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/internal/patchtest"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestPatchedModuleRealGuest builds the guest image with exfat built from
// the Debian source and a one-line patch (guest build --patch --name),
// and explores ext2 against exfat at depth 1 on it, named as `explore
// --image NAME` names it: the patched size is a finding that names the
// image and its patch, and the same run on the stock image finds nothing.
func TestPatchedModuleRealGuest(t *testing.T) {
	longtest.Need(t, "a patched exfat built, booted and explored against the stock image (about 50 s)")
	cache, err := guest.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		t.Skip("skipping: builds a module and boots a guest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	const name = "themis-test-exfat-off-by-one"
	img := patchtest.BuildExfat(ctx, t, cache, name)
	t.Logf("patched image %s (built %v, cached %v) in %v", img.Key, img.Built, img.Cached, time.Since(start))
	for _, tt := range []struct {
		name, image string
		found       bool
	}{{"patched", name, true}, {"stock", "", false}} {
		t.Run(tt.name, func(t *testing.T) {
			m := sessiontest.Real(t, session.Config{})
			s, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{"ext2", "exfat"}, Depth: 1, Seed: 1, Image: tt.image}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := m.Findings(ctx, s.Session)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d states, %d findings in %v", s.States, len(fs), s.Elapsed)
			for _, f := range fs {
				t.Logf("finding %s %v: %s", f.Kind, f.Trace, f.Detail)
			}
			if found := len(fs) > 0; found != tt.found || tt.found && !strings.Contains(fs[0].Detail, "size 0 != 1") {
				t.Errorf("findings %d, want some: %v (the patched exfat reports sizes a byte long)", len(fs), tt.found)
			}
			info, err := m.Get(ctx, s.Session)
			if err != nil {
				t.Fatal(err)
			}
			if patched := info.Image.Custom(); patched != tt.found || patched && info.Image.Key != img.Key {
				t.Errorf("the session's image %+v, want the patched one: %v", info.Image, tt.found)
			}
			for _, f := range fs {
				if f.Image == nil || f.Image.Key != img.Key || len(f.Image.Patches) != 1 || f.Image.Patches[0].Name != patchtest.ExfatPatchName {
					t.Errorf("finding %s names image %+v, want %s with %s", f.ID, f.Image, img.Key, patchtest.ExfatPatchName)
				}
			}
		})
	}
}

// TestPatchedModuleCrashRealGuest is issue 27's crashing patch: exfat
// built with a BUG_ON in mkdir below the root (patchtest.ExfatBugOnMkdir),
// explored on exfat alone at depth 2 over mkdir and create_file. The
// kernel hits the BUG on a reachable op sequence: a "kernel" finding
// whose report is the module's "kernel BUG at fs/exfat/namei.c", RIP in
// exfat_mkdir called from vfs_mkdir; the search goes on to its end past
// every crash, the finding is minimized to the two mkdirs, and they crash
// a fresh session of the image again with the same signature.
func TestPatchedModuleCrashRealGuest(t *testing.T) {
	longtest.Need(t, "a patched exfat that hits BUG_ON, explored (about 90 s)")
	cache, err := guest.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		t.Skip("skipping: builds a module and boots guests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img := patchtest.Build(ctx, t, cache, "themis-test-exfat-bug-on-mkdir", "exfat-bug-on-mkdir.patch", patchtest.ExfatBugOnMkdir)
	m := sessiontest.Real(t, session.Config{})
	start := time.Now()
	sum, err := Run(ctx, m, Options{Workers: 1, Lanes: []string{"exfat"}, Depth: 2, Branching: 2, Ops: []string{explore.OpMkdir, explore.OpCreateFile}, Seed: 7, Image: img.Key}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := m.Findings(ctx, sum.Session)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d states, %d findings, stopped %q in %v", sum.States, len(fs), sum.Stopped, time.Since(start).Round(time.Millisecond))
	var kernel *session.Finding
	for i, f := range fs {
		t.Logf("finding %s %s (minimized %v) %q: %s", f.ID, f.Kind, f.Minimized, f.Trace, f.Detail)
		if f.Kind == session.KindKernel && kernel == nil {
			kernel = &fs[i]
		}
	}
	switch {
	case kernel == nil:
		t.Fatal("no kernel finding: the patched exfat's BUG_ON on a mkdir below the root was not seen")
	case kernel.Kernel.Kind != kreport.Bug || !strings.HasPrefix(kernel.Kernel.Title, "kernel BUG at fs/exfat/namei.c:"):
		t.Errorf("report %s %q, want a BUG at fs/exfat/namei.c", kernel.Kernel.Kind, kernel.Kernel.Title)
	case !strings.HasPrefix(kernel.Kernel.RIP, "exfat_mkdir+") || !slices.ContainsFunc(kernel.Kernel.Trace, func(fr string) bool { return strings.HasPrefix(fr, "vfs_mkdir+") }):
		t.Errorf("RIP %q, trace %q: want exfat_mkdir called from vfs_mkdir", kernel.Kernel.RIP, kernel.Kernel.Trace)
	case !kernel.Minimized || len(kernel.Trace) != 2 || !strings.HasPrefix(kernel.Trace[0], "mkdir ") || !strings.HasPrefix(kernel.Trace[1], "mkdir "):
		t.Errorf("finding trace %q (minimized %v), want the two mkdirs", kernel.Trace, kernel.Minimized)
	case sum.Stopped != "":
		t.Errorf("the search stopped early: %q", sum.Stopped)
	default:
		replayFresh(ctx, t, m, img.Key, kernel)
	}
}
