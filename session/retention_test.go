package session

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestLedgerPrune: a prune drops events older than the cutoff and the
// sessions that ended before it (with their checkpoints and events); it
// keeps running sessions, sessions that ended after the cutoff, and every
// finding.
func TestLedgerPrune(t *testing.T) {
	ctx := context.Background()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	now := time.Now().UTC()
	old, cutoff := now.Add(-40*24*time.Hour), now.Add(-30*24*time.Hour)
	sessions := []struct {
		id    string
		state State
		ended time.Time
		kept  bool
	}{
		{"s-old", StateEnded, old, false},
		{"s-oldfail", StateFailed, old, false},
		{"s-recent", StateEnded, now, true},
		{"s-running", StateRunning, time.Time{}, true},
	}
	for _, s := range sessions {
		in := &Info{ID: s.id, State: s.state, Created: old, Ended: s.ended, Lanes: []Lane{}}
		if err := l.insertSession(ctx, in); err != nil {
			t.Fatal(err)
		}
		if err := l.insertCheckpoint(ctx, &Checkpoint{Session: s.id, ID: "c-1", Created: old}, 1); err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Time{old, now} {
			if _, err := l.insertEvent(ctx, Event{Session: s.id, Time: at, Kind: "op"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.insertFinding(ctx, &Finding{ID: "f-" + s.id, Session: s.id, Created: old}); err != nil {
			t.Fatal(err)
		}
		if err := l.saveRecord(ctx, s.id, "explore", []byte(`{}`), old); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.prune(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Pruned{Sessions: 2, Events: 6}); got != want {
		t.Errorf("prune = %+v, want %+v", got, want)
	}
	for _, s := range sessions {
		_, err := l.session(ctx, s.id)
		if kept := err == nil; kept != s.kept {
			t.Errorf("%s: kept %v (%v), want %v", s.id, kept, err, s.kept)
		}
		evs, err := l.events(ctx, s.id, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		wantEvents := 0
		if s.kept {
			wantEvents = 1 // the recent one
		}
		if len(evs) != wantEvents {
			t.Errorf("%s: %d events left, want %d", s.id, len(evs), wantEvents)
		}
		if _, _, err := l.record(ctx, s.id); (err == nil) != s.kept {
			t.Errorf("%s: run record: %v; want kept %v", s.id, err, s.kept)
		}
		cps, err := l.checkpoints(ctx, s.id, true)
		if err != nil || (len(cps) == 1) != s.kept {
			t.Errorf("%s: checkpoints %v, %v; want kept %v", s.id, cps, err, s.kept)
		}
	}
	fs, err := l.findings(ctx, "")
	if err != nil || len(fs) != len(sessions) {
		t.Errorf("findings after prune: %d, %v; want all %d kept", len(fs), err, len(sessions))
	}
	ids := make([]string, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.ID)
	}
	if !slices.Contains(ids, "f-s-old") {
		t.Errorf("findings %v: the pruned session's finding is gone", ids)
	}
}
