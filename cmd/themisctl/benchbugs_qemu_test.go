package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/bugs"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestBenchBugsRealGuest runs bench bugs on two fast cases of the real
// corpus end to end, through a daemon: each case's patch built into an
// image, the default check on it and on the stock image; both are
// detected, by findings the stock image does not show, each detection
// shows again in a fresh session where its kind can be replayed, and the stock
// images show nothing but the triaged exFAT stamp (docs/hunt.md): a
// create or mkdir mtime that reads back 10 ms earlier after a remount.
func TestBenchBugsRealGuest(t *testing.T) {
	longtest.Need(t, "bench bugs on two corpus cases and their stock images (about 10 minutes)")
	env := vmmtest.Setup(t)
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sock := startDaemon(t, bin, t.TempDir(), env.CacheDir)
	corpus, err := filepath.Abs("../../bugs")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--addr", "unix://" + sock, "--cache-dir", env.CacheDir, "--json",
		"bench", "bugs", "--corpus", corpus, "--cases", "exfat-stream-size-typo,vfat-setattr-times", "--budget", "3m"}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		t.Fatalf("themisctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var rep themisv1.BugsReport
	if err := jsonout.DecodeInto(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.GetCases() != 2 || len(rep.GetOutcomes()) != 2 {
		t.Fatalf("report %s", out)
	}
	for _, o := range rep.GetOutcomes() {
		if o.GetError() != "" || !o.GetDetected() || o.GetFirstS() <= 0 || o.GetFirstKey() == "" {
			t.Errorf("case %s: %v, want detected", o.GetCase().GetId(), o)
		}
		// Replayed in a fresh session, a detection shows again, or the
		// replay says why it cannot replay its kind (the fsck
		// self-reference).
		if o.GetDetected() && !o.GetReproduced() && !strings.HasPrefix(o.GetRepro(), "not replayable: ") {
			t.Errorf("case %s: detection %s not reproduced: %s", o.GetCase().GetId(), o.GetFirstKey(), o.GetRepro())
		}
	}
	for _, b := range rep.GetBaselines() {
		if b.GetError() != "" || b.GetImage() == "" {
			t.Errorf("stock %s/%s: %v", b.GetFs(), b.GetFlavor(), b)
		}
		// Every key of a stock baseline is one docs/hunt.md triages
		// (bugs.TriagedStock): the exFAT stamp cells, its lost name
		// after a fsync in a directory that grew.
		for _, k := range b.GetKeys() {
			if !slices.Contains(bugs.TriagedKeys(b.GetFs()), k) {
				t.Errorf("stock %s/%s found %s: not a triaged stock finding", b.GetFs(), b.GetFlavor(), k)
			}
		}
	}
}
