package exploration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/guest"
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
			s, err := Run(ctx, m, Options{Lanes: []string{"ext2", "exfat"}, Depth: 1, Seed: 1, Image: tt.image}, nil, nil)
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
