package session

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/themisfs/themis/guest"
)

// TestFindingSeenAcrossRuns: a finding of the same signature, lanes and
// policy counts once per session that finds it, keeps its first finding
// and first and last time; other lanes or another policy are another.
func TestFindingSeenAcrossRuns(t *testing.T) {
	ctx := context.Background()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	mk := func(id, session string, lanes []string, policy string, at time.Duration) *Finding {
		return &Finding{ID: id, Session: session, Kind: "state-divergence", Signature: "state-divergence mkdir nlink",
			LaneSpecs: lanes, Policy: policy, Created: t0.Add(at)}
	}
	eb := []string{"ext2", "btrfs"}
	stock := &guest.Ref{Key: "k-stock", KernelVersion: "6.1.0-1-cloud-amd64", Flavor: "cloud"}
	patched := &guest.Ref{Key: "k-patched", KernelVersion: "6.1.0-1-cloud-amd64", Flavor: "cloud",
		Patches: []guest.Input{{Name: "fix.patch", BLAKE3: "ab"}}, Built: []string{"exfat"}}
	withImage := func(f *Finding, r *guest.Ref) *Finding { f.Image = r; return f }
	for _, f := range []*Finding{
		mk("f-1", "s-1", eb, "exact", 0),
		mk("f-2", "s-1", eb, "exact", time.Minute), // the same run again: not another time
		mk("f-3", "s-2", eb, "exact", time.Hour),
		mk("f-4", "s-3", eb, "auto", 2*time.Hour),                       // another policy
		mk("f-5", "s-3", []string{"ext2", "xfs"}, "exact", 3*time.Hour), // other lanes
		withImage(mk("f-6", "s-4", eb, "exact", 4*time.Hour), stock),    // a stock image: the same
		withImage(mk("f-7", "s-5", eb, "exact", 5*time.Hour), patched),  // a patched module's: another
	} {
		if err := l.insertFinding(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		id          string
		times       int
		first       string
		firstAt, at time.Duration
	}{
		{"f-1", 3, "f-1", 0, 4 * time.Hour},
		{"f-6", 3, "f-1", 0, 4 * time.Hour},
		{"f-4", 1, "f-4", 2 * time.Hour, 2 * time.Hour},
		{"f-5", 1, "f-5", 3 * time.Hour, 3 * time.Hour},
		{"f-7", 1, "f-7", 5 * time.Hour, 5 * time.Hour},
	}
	for _, tt := range tests {
		f, err := l.finding(ctx, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		s := f.Seen
		if s.Times != tt.times || s.FirstID != tt.first || !s.First.Equal(t0.Add(tt.firstAt)) || !s.Last.Equal(t0.Add(tt.at)) {
			t.Errorf("%s seen %+v, want %d times, first %s at +%v, last at +%v", tt.id, s, tt.times, tt.first, tt.firstAt, tt.at)
		}
	}
	if f, err := l.finding(ctx, "f-7"); err != nil || !reflect.DeepEqual(f.Image, patched) {
		t.Errorf("f-7's image read back: %+v, %v; want %+v", f.Image, err, patched)
	}
	all, err := l.findings(ctx, "")
	if err != nil || len(all) != 7 || all[2].Seen.Times != 3 {
		t.Errorf("the list: %d findings, %v; want 7, f-3 seen 3 times", len(all), err)
	}
}
