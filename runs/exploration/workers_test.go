package exploration

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestWorkerCount checks what Options.Workers asks for: 0 is auto (one
// per CPU, at most 8), a count is that count, and either is cut to the
// sessions the manager has room for.
func TestWorkerCount(t *testing.T) {
	auto := fmt.Sprintf("auto: %d CPUs", runtime.GOMAXPROCS(0))
	tests := []struct {
		name    string
		max     int // the manager's MaxSessions
		workers int
		want    int
		why     string
	}{
		{"auto", 16, 0, AutoWorkerCount(), auto},
		{"asked", 16, 3, 3, "asked"},
		{"asked past the room", 2, 3, 2, "asked 3, room for 2 sessions"},
		{"auto past the room", 1, 0, 1, fmt.Sprintf("%s %d, room for 1 sessions", auto, AutoWorkerCount())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{MaxSessions: tt.max}, nil)
			got, why := workerCount(m, Options{Lanes: []string{"ext2"}, Workers: tt.workers})
			if tt.name == "auto past the room" && AutoWorkerCount() == 1 {
				tt.why = auto // one CPU: auto asks for no more than there is room for
			}
			if got != tt.want || why != tt.why {
				t.Errorf("workerCount(%d) with room for %d = %d, %q; want %d, %q", tt.workers, tt.max, got, why, tt.want, tt.why)
			}
		})
	}
}
