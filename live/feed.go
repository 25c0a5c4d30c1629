package live

import (
	"sync"
	"time"
)

// Feed publishes one run's updates: a run may use several sessions (its
// workers, a check's parts, a crash run's guests replaced), each
// registered at its first update.
type Feed struct {
	h   *Hub
	run Run

	mu       sync.Mutex
	sessions []string
	seen     map[string]bool
}

// Start begins a run of the given kind and options (cut to MaxText).
func (h *Hub) Start(kind, options string) *Feed {
	if h == nil {
		return nil
	}
	return &Feed{h: h, run: Run{Kind: clip(kind, MaxName), Options: clip(options, MaxText), Started: time.Now()}, seen: make(map[string]bool)}
}

// Publish sets session's last update to u (its Seq, Kind and Done are
// the Feed's to set).
func (f *Feed) Publish(session string, u Update) {
	if f == nil || session == "" {
		return
	}
	f.mu.Lock()
	if !f.seen[session] {
		f.seen[session] = true
		f.sessions = append(f.sessions, session)
	}
	f.mu.Unlock()
	f.h.publish(session, f.run, u)
}

// End ends the run in every session it published to. It is idempotent.
func (f *Feed) End() {
	if f == nil {
		return
	}
	f.mu.Lock()
	sessions := f.sessions
	f.sessions = nil
	f.mu.Unlock()
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	for _, s := range sessions {
		if e := f.h.entries[s]; e != nil && !e.ended {
			f.h.end(s, e)
		}
	}
}
