package check

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
)

// MaxParallel bounds Options.Parallel.
const MaxParallel = 8

// autoParallel is how many parts auto runs at once at most: on a 2-core
// host three guests under TCG keep both cores busy (one uses 1.2,
// docs/benchmarks.md), and every part of a one-lane check starts within
// the clock part's minute instead of after the parts before it.
const autoParallel = 3

// sideBySide is how many parts of parts run at once for o, and why:
// o.Parallel when asked, else every part that runs, at most autoParallel,
// and no more than the manager has sessions for with one to spare (a
// worker whose guest died takes a fresh session before its old one is
// closed).
func sideBySide(m *session.Manager, o Options, parts []Part) (int, string) {
	if o.Parallel > 0 {
		return o.Parallel, "asked"
	}
	runnable := 0
	for _, p := range parts {
		if p.Skipped == "" {
			runnable++
		}
	}
	want := max(1, min(runnable, autoParallel))
	per := max(1, o.Workers)
	if room := (m.Free(o.MemoryMiB) - 1) / per; room < want {
		return max(1, room), fmt.Sprintf("auto: %d parts, room for %d at once beside a spare session", runnable, max(1, room))
	}
	return want, fmt.Sprintf("auto: %d parts, at most %d at once", runnable, autoParallel)
}

// schedule is a check's slots: at most slots parts run at once, each
// until the end of its budget.
type schedule struct {
	slots    int
	whole    time.Duration
	deadline time.Time
	free     chan struct{} // a token per slot not taken

	mu      sync.Mutex
	running map[*Part]time.Time // the end of each running part's budget
}

func newSchedule(slots int, whole time.Duration, deadline time.Time) *schedule {
	s := &schedule{slots: slots, whole: whole, deadline: deadline, free: make(chan struct{}, slots), running: map[*Part]time.Time{}}
	for range slots {
		s.free <- struct{}{}
	}
	return s
}

// take waits for a slot; false when ctx ended first.
func (s *schedule) take(ctx context.Context) bool {
	select {
	case <-s.free:
		return true
	case <-ctx.Done():
		return false
	}
}

// start gives rest[0], which holds a slot, its budget as it starts now,
// rest being the parts not yet started, and counts it running.
func (s *schedule) start(rest []Part, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := s.deadline.Sub(now)
	var running []time.Duration
	for _, end := range s.running {
		running = append(running, min(max(end.Sub(now), 0), left))
	}
	b := share(rest, s.whole, left, s.slots, running)
	s.running[&rest[0]] = now.Add(b)
	return b
}

// release gives p's slot back.
func (s *schedule) release(p *Part) {
	s.mu.Lock()
	delete(s.running, p)
	s.mu.Unlock()
	s.free <- struct{}{}
}

// share is the budget of rest[0] (rest: the parts not yet started) when
// left of the whole remains, slots parts run at once and running holds
// what is left of the budgets of the parts running now: the clock part at
// most clockShare of the whole; an explore part all of left when it and
// the explore parts after it have a slot each now, else its weight's
// share, among theirs, of the slots' time to the end that the running
// parts leave (one after another, slots 1: its weight's share of left).
func share(rest []Part, whole, left time.Duration, slots int, running []time.Duration) time.Duration {
	if left <= 0 {
		return 0
	}
	if rest[0].Kind == KindClock {
		return min(left, max(time.Duration(float64(whole)*clockShare), minClock))
	}
	total, n := 0, 0
	for _, p := range rest {
		if p.Skipped == "" && p.Kind != KindClock {
			total, n = total+p.weight, n+1
		}
	}
	if total == 0 || n <= slots-len(running) {
		return left
	}
	avail := time.Duration(slots) * left
	for _, r := range running {
		avail -= r
	}
	return min(left, avail*time.Duration(rest[0].weight)/time.Duration(total))
}

// serialized are out's sinks called one at a time: parts side by side
// call them from their own goroutines.
func (out Sinks) serialized() Sinks {
	var mu sync.Mutex
	lock := func() func() { mu.Lock(); return mu.Unlock }
	s := Sinks{}
	if f := out.Started; f != nil {
		s.Started = func(p *Part) { defer lock()(); f(p) }
	}
	if f := out.Progress; f != nil {
		s.Progress = func(p *Part, pr exploration.Progress) { defer lock()(); f(p, pr) }
	}
	if f := out.Found; f != nil {
		s.Found = func(p *Part, fd session.Finding) { defer lock()(); f(p, fd) }
	}
	if f := out.Cell; f != nil {
		s.Cell = func(p *Part, c clocksweep.Cell) { defer lock()(); f(p, c) }
	}
	if f := out.Done; f != nil {
		s.Done = func(p *Part) { defer lock()(); f(p) }
	}
	return s
}
