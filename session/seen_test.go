package session

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/themisfs/themis/errkind"
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

// TestFindingStatus: a status set on one finding is every finding's of
// the same kind across runs (and no other's), it outlives the ledger's
// close, and it is refused for an unknown status, an unknown finding and
// one stored before findings were counted across runs.
func TestFindingStatus(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := openLedger(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i, f := range []*Finding{
		{ID: "f-1", Session: "s-1", Kind: "kernel", Signature: "kernel|ext4_mb_new_inode_pa", LaneSpecs: []string{"ext4"}},
		{ID: "f-2", Session: "s-2", Kind: "kernel", Signature: "kernel|ext4_mb_new_inode_pa", LaneSpecs: []string{"ext4"}},
		{ID: "f-3", Session: "s-2", Kind: "kernel", Signature: "kernel|other", LaneSpecs: []string{"ext4"}},
		{ID: "f-old", Session: "s-0", Kind: "state-divergence", LaneSpecs: []string{"ext2"}},
	} {
		f.Created = t0.Add(time.Duration(i) * time.Minute)
		if err := l.insertFinding(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	// f-old as stored before finding_seen: no key in its ops.
	if _, err := l.db.ExecContext(ctx, `UPDATE findings SET ops = json_remove(ops, '$.seen_key') WHERE id = 'f-old'`); err != nil {
		t.Fatal(err)
	}
	if f, err := l.finding(ctx, "f-2"); err != nil || f.Seen.Status != StatusNew || !f.Seen.StatusTime.IsZero() {
		t.Fatalf("before any: %+v, %v; want new, never said", f.Seen, err)
	}
	at := t0.Add(time.Hour)
	if err := l.setFindingStatus(ctx, "f-1", StatusReported, at); err != nil {
		t.Fatal(err)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	if l, err = openLedger(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for id, want := range map[string]string{"f-1": StatusReported, "f-2": StatusReported, "f-3": StatusNew} {
		f, err := l.finding(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if f.Seen.Status != want || (want == StatusReported) != f.Seen.StatusTime.Equal(at) {
			t.Errorf("%s after a reopen: %q at %v, want %q", id, f.Seen.Status, f.Seen.StatusTime, want)
		}
	}
	if err := l.setFindingStatus(ctx, "f-nope", StatusExpected, at); !errors.Is(err, errkind.ErrNotFound) {
		t.Errorf("an unknown finding: %v, want ErrNotFound", err)
	}
	if err := l.setFindingStatus(ctx, "f-old", StatusExpected, at); !errors.Is(err, errkind.ErrState) {
		t.Errorf("a finding stored before: %v, want ErrState", err)
	}
	var m Manager
	var fe *errkind.FieldError
	if _, err := m.SetFindingStatus(ctx, "f-1", "fixed"); !errors.As(err, &fe) || fe.Field != "status" {
		t.Errorf("an unknown status: %v, want an error on the field status", err)
	}
	if _, err := m.SetFindingStatus(ctx, "", StatusNew); !errors.As(err, &fe) || fe.Field != "finding_id" {
		t.Errorf("no id: %v, want an error on finding_id", err)
	}
}
