package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/report/reporttest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestReplayPassesRealGuest runs a trace four times from one checkpoint
// with the guest clock pinned: on ext2 (whole seconds, no new inode, so no
// random generation number) the passes leave the same disk — all four on
// a quiet host (docs/replay.md); an op that a loaded host delays past the
// pinned second stamps the next one, so the test asks for fewer distinct
// disks than passes — and the QEMU backend hashes RAM. Then the same with
// the clock free under QEMU's instruction counting (a session of its own):
// guest time follows the instructions, so it too leaves fewer distinct
// disks than passes.
func TestReplayPassesRealGuest(t *testing.T) {
	longtest.Need(t, "replay passes of a real finding through the CLI (about 35 s)")
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sock := startDaemon(t, bin, t.TempDir(), env.CacheDir)
	out, err := exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "--json", "replay", "--passes", "4", "--clock", "pinned",
		"--icount", "off",
		"--fs", "ext2:seed=1", "--trace", "write f-00 0 4096 0x55; chmod f-00 0600; truncate f-01 100").Output()
	if err != nil {
		t.Fatalf("replay --passes: %v", err)
	}
	var r themisv1.PassesResult
	decodeOut(t, out, &r)
	t.Logf("%v", &r)
	if rows := r.GetRows(); len(rows) != 1 || rows[0].GetClock() != "pinned" || rows[0].GetPasses() != 4 || rows[0].GetDistinctDiskHashes()["ext2:seed=1"] < 1 ||
		rows[0].GetDistinctDiskHashes()["ext2:seed=1"] >= 4 || rows[0].GetDistinctRamHashes() < 1 {
		t.Errorf("rows %v: want one pinned row, fewer distinct ext2 disks than 4 passes, RAM hashed", rows)
	}
	out, err = exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "--json", "replay", "--passes", "4", "--clock", "free", "--icount", "on",
		"--fs", "ext2:seed=1", "--trace", "write f-00 0 4096 0x55; chmod f-00 0600; truncate f-01 100").Output()
	if err != nil {
		t.Fatalf("replay --passes --icount on: %v", err)
	}
	r.Reset()
	decodeOut(t, out, &r)
	t.Logf("icount: %v", &r)
	if rows := r.GetRows(); len(rows) != 1 || !rows[0].GetIcount() || rows[0].GetClock() != "free" || rows[0].GetDistinctDiskHashes()["ext2:seed=1"] < 1 ||
		rows[0].GetDistinctDiskHashes()["ext2:seed=1"] >= 4 {
		t.Errorf("rows %v: want one icount row, clock free, fewer distinct ext2 disks than 4 passes", rows)
	}
}

// TestBisectRealGuest replays a real finding (ext2 against vfat under
// exact, its run report loaded in Chromium with every finding on it) on
// the cloud and the generic kernel's images with `themisctl bisect`: it
// reproduces on both, so no image differs; an image outside the daemon's
// cache is refused by name.
func TestBisectRealGuest(t *testing.T) {
	longtest.Need(t, "a finding bisected over the cloud and generic kernels and its footprint (about 40 s)")
	env := vmmtest.Setup(t)
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	sock := startDaemon(t, bin, t.TempDir(), env.CacheDir)
	var images []string
	for _, flavor := range []string{"cloud", "generic"} {
		out, err := exec.CommandContext(ctx, bin, "--cache-dir", env.CacheDir, "--json", "guest", "build", "--flavor", flavor).Output()
		if err != nil {
			t.Fatalf("guest build --flavor %s: %v", flavor, err)
		}
		var img themisv1.CachedGuestImage
		decodeOut(t, out, &img)
		images = append(images, filepath.Dir(img.GetKernel()))
	}
	cli := func(args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, bin, append([]string{"--addr", "unix://" + sock, "--json"}, args...)...).Output()
	}
	page := filepath.Join(t.TempDir(), "run.html")
	out, _ := cli("explore", "--fs", "ext2,vfat", "--policy", "exact", "--depth", "1", "--report", page)
	var res themisv1.ExploreResult
	decodeOut(t, out, &res)
	found := res.GetFindingList()
	if len(found) == 0 {
		t.Fatalf("explore: %s: want a finding", out)
	}
	if chromium, ok := reporttest.LookChromium(); ok {
		dom := reporttest.DumpDOM(t, chromium, page)
		for _, f := range found {
			if !strings.Contains(dom, `data-id="`+f.GetId()+`"`) {
				t.Errorf("--report: finding %s of the ext2,vfat run not on the page", f.GetId())
			}
		}
	}
	out, err := cli("bisect", found[0].GetId(), "--images", strings.Join(images, ","))
	if err != nil {
		t.Fatalf("bisect: %v", err)
	}
	var r themisv1.BisectResponse
	decodeOut(t, out, &r)
	t.Logf("%v", &r)
	if rows := r.GetRows(); len(rows) != 2 || !rows[0].GetReproduced() || !rows[1].GetReproduced() || r.GetFirstDifferingImage() != "" ||
		rows[0].GetKernelVersion() == rows[1].GetKernelVersion() {
		t.Errorf("bisect %v: want both kernels to reproduce, none differing", &r)
	}
	cmd := exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "replay", found[0].GetId(), "--image", t.TempDir())
	if msg, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(msg), "image") {
		t.Errorf("replay --image outside the cache: %v, %s; want it refused naming image", err, msg)
	}
}
