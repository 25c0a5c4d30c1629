package session

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestLedgerFindingsFullSync: findings are committed with synchronous=FULL
// (each commit fsyncs the WAL: a reported finding survives power loss);
// everything else keeps NORMAL (durable at the next checkpoint, consistent
// always).
func TestLedgerFindingsFullSync(t *testing.T) {
	ctx := context.Background()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for _, tt := range []struct {
		name string
		mode func() (int, error)
		want int
	}{
		{"findings", func() (int, error) { return syncMode(ctx, l.findingsDB()) }, 2},
		{"the rest", func() (int, error) { return syncMode(ctx, l.db) }, 1},
	} {
		got, err := tt.mode()
		if err != nil || got != tt.want {
			t.Errorf("%s: PRAGMA synchronous = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
	f := &Finding{ID: "f-1", Session: "s-1", Kind: "errno-divergence", Created: time.Now()}
	if err := l.insertFinding(ctx, f); err != nil {
		t.Fatal(err)
	}
	f.Detail = "minimized"
	if err := l.updateFinding(ctx, f); err != nil {
		t.Fatal(err)
	}
	if got, err := l.finding(ctx, "f-1"); err != nil || got.Detail != "minimized" {
		t.Errorf("finding read back = %v, %v", got, err)
	}
}

// BenchmarkLedgerFindingInsert compares a finding commit under NORMAL (the
// old ledger) and FULL synchronous on the same file system.
func BenchmarkLedgerFindingInsert(b *testing.B) {
	for _, mode := range []string{"NORMAL", "FULL"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			l, err := openLedger(ctx, filepath.Join(b.TempDir(), "ledger.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer l.close()
			db := l.findingsDB()
			if _, err := db.ExecContext(ctx, "PRAGMA synchronous = "+mode); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if err := l.insertFinding(ctx, &Finding{ID: fmt.Sprintf("f-%d", i), Session: "s-1", Created: time.Now()}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
