package session_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestLedgerFileModes: the ledger is 0600 in a 0700 state dir however the
// dir and file were before (a wider mode is narrowed).
func TestLedgerFileModes(t *testing.T) {
	tests := []struct {
		name     string
		prepare  func(t *testing.T, dir string) // dir is the state dir (not yet created)
		wantFile os.FileMode
	}{
		{"new dir", func(*testing.T, string) {}, 0o600},
		{"existing 0755 dir", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}, 0o600},
		{"existing 0644 ledger", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "ledger.db"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, 0o600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			tt.prepare(t, dir)
			sessiontest.NewManager(t, dir, session.Config{}, nil)
			for _, p := range []struct {
				path string
				want os.FileMode
			}{{dir, 0o700}, {filepath.Join(dir, "ledger.db"), tt.wantFile}} {
				fi, err := os.Stat(p.path)
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode().Perm(); got != p.want {
					t.Errorf("%s: mode %v, want %v", p.path, got, p.want)
				}
			}
			// SQLite's WAL and shared-memory index take the database's mode.
			for _, side := range []string{"ledger.db-wal", "ledger.db-shm"} {
				if fi, err := os.Stat(filepath.Join(dir, side)); err == nil && fi.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s: mode %v, want no group or other bits", side, fi.Mode().Perm())
				}
			}
		})
	}
}
