package session

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/themisfs/themis/errkind"
)

// TestRunRecords: a saved record reads back byte for byte with its kind,
// a second save replaces it, and a session without one is errkind.ErrNotFound.
func TestRunRecords(t *testing.T) {
	ctx := context.Background()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	steps := []struct {
		kind, record string
	}{{"explore", `{"a":1}`}, {"explore/v2", "\x00binary\xff"}}
	for _, st := range steps {
		if err := l.saveRecord(ctx, "s-1", st.kind, []byte(st.record), at); err != nil {
			t.Fatal(err)
		}
		kind, rec, err := l.record(ctx, "s-1")
		if err != nil || kind != st.kind || string(rec) != st.record {
			t.Errorf("after saving %q %q: got %q %q, %v", st.kind, st.record, kind, rec, err)
		}
	}
	if _, _, err := l.record(ctx, "s-2"); !errors.Is(err, errkind.ErrNotFound) {
		t.Errorf("a session without a record: %v, want errkind.ErrNotFound", err)
	}
}
