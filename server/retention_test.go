package server

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// TestDaemonPrunesAtStart: the daemon prunes the ledger by its retention
// setting when it starts (ledger.retention_days; default 30).
func TestDaemonPrunesAtStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		days int
		want time.Duration
	}{
		{"default", 0, 30 * 24 * time.Hour},
		{"a week", 7, 7 * 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, f := startFake(t, Config{Listen: "unix://" + sockDir(t) + "/themisd.sock", Ledger: LedgerConfig{RetentionDays: tt.days}})
			f.mu.Lock()
			cutoffs := append([]time.Time(nil), f.pruned...)
			f.mu.Unlock()
			if len(cutoffs) == 0 {
				t.Fatal("no prune at start")
			}
			if age := time.Since(cutoffs[0]); age < tt.want-time.Minute || age > tt.want+time.Minute {
				t.Errorf("pruned before %v (%v ago), want %v ago", cutoffs[0], age, tt.want)
			}
		})
	}
}

// TestRetentionConfig: a negative retention is refused, naming the key.
func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	_, err := startDaemon(t.Context(), Config{Listen: "unix:///tmp/x.sock", StateDir: t.TempDir(), Ledger: LedgerConfig{RetentionDays: -1}},
		zaptest.NewLogger(t), fakeOpen(&fakeDomain{}))
	if err == nil || !strings.Contains(err.Error(), "ledger.retention_days") {
		t.Errorf("err = %v, want it to name ledger.retention_days", err)
	}
	cfg, err := ParseConfig([]byte("[ledger]\nretention_days = 9\n"))
	if err != nil || cfg.Ledger.RetentionDays != 9 {
		t.Errorf("ParseConfig = %+v, %v", cfg.Ledger, err)
	}
}
