package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/internal/patchtest"
	"github.com/themisfs/themis/repro"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestImageFlagRealGuest runs explore, crash and sweep clock with --image
// naming a patched exfat image (guest build --patch --name), through a
// daemon, as a user would: explore finds what the patch causes and names
// the image and its patch; replay of that finding boots the patched image
// by itself and reproduces it; its export carries the patch and says the
// stock image does not show it (a replay there, judged under the run's
// policy); crash and the clock sweep run on it; every session but the
// export's stock replay booted the patched image.
func TestImageFlagRealGuest(t *testing.T) {
	longtest.Need(t, "explore, replay, crash and sweep clock on a patched exfat image through --image (about 90 s)")
	env := vmmtest.Setup(t)
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const name = "themis-test-exfat-off-by-one"
	img := patchtest.BuildExfat(ctx, t, env.CacheDir, name)
	sock := startDaemon(t, bin, t.TempDir(), env.CacheDir)
	cli := func(args ...string) []byte {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, append([]string{"--addr", "unix://" + sock, "--json"}, args...)...).Output()
		if err != nil {
			t.Fatalf("themisctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	var res themisv1.ExploreResult
	out := cli("explore", "--image", name, "--fs", "ext2,exfat", "--depth", "1", "--workers", "1")
	decodeOut(t, out, &res)
	found := res.GetFindingList()
	if len(found) == 0 || !strings.Contains(found[0].GetDetail(), "size 0 != 1") {
		t.Fatalf("explore --image %s: %s: want the patch's size finding", name, out)
	}
	if im := res.GetSummary().GetImage(); im.GetKey() != img.Key || len(im.GetPatches()) != 1 || im.GetPatches()[0].GetName() != patchtest.ExfatPatchName {
		t.Errorf("explore's summary names image %v, want %s with %s", im, img.Key, patchtest.ExfatPatchName)
	}
	var rep themisv1.ReplayResponse
	decodeOut(t, cli("replay", found[0].GetId()), &rep)
	if !rep.GetReproduced() || !strings.Contains(imageLine(rep.GetBooted()), patchtest.ExfatPatchName) {
		t.Errorf("replay %s without --image: %v; want it reproduced on the patched image", found[0].GetId(), &rep)
	}
	dir := filepath.Join(t.TempDir(), "export")
	cli("findings", "export", found[0].GetId(), "--out", dir)
	readme, err := os.ReadFile(filepath.Join(dir, "README"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "does not reproduce: the change above causes it") {
		t.Errorf("the export's README does not say the stock image lacks it:\n%s", readme)
	}
	if b, err := os.ReadFile(filepath.Join(dir, repro.PatchFile(0, patchtest.ExfatPatchName))); err != nil || string(b) != patchtest.ExfatOffByOne {
		t.Errorf("the export's copy of the patch: %v, %q", err, b)
	}
	cli("crash", "--image", name, "--fs", "exfat", "--trace", "create f 0644; fsync f", "--max-states", "4")
	cli("sweep", "clock", "--image", name, "--fs", "exfat", "--values", "0", "--ops", "create")
	var list themisv1.ListSessionsResponse
	decodeOut(t, cli("session", "list", "--all"), &list)
	stock := 0
	for _, s := range list.GetSessions() {
		if len(s.GetImage().GetPatches()) == 0 {
			stock++
		} else if s.GetImage().GetKey() != img.Key {
			t.Errorf("session %s (%s) booted image %v, want the patched %s", s.GetId(), s.GetReason(), s.GetImage(), img.Key)
		}
	}
	if n := len(list.GetSessions()); n < 5 || stock != 1 {
		t.Errorf("%d sessions, %d on a stock image: want explore's, replay's, crash's and the sweep's on the patched one, the export's replay on the stock one", n, stock)
	}
}
