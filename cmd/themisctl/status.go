package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// plainEvery is how often a progress line is printed where stderr is not
// a terminal (a CI log): every step at once, the counters at most this
// often.
const plainEvery = 30 * time.Second

// statusLine prints a long run's progress on stderr: on a terminal one
// line redrawn in place; elsewhere a plain line at most every plainEvery.
// Steps (a part begins, a case ends) are printed at once either way.
type statusLine struct {
	w     io.Writer
	tty   bool
	shown bool      // a redrawn line is on the terminal
	last  time.Time // the last plain progress line
}

func newStatusLine() *statusLine {
	return &statusLine{w: os.Stderr, tty: isTerminal(os.Stderr)}
}

// Update shows line as the current progress.
func (s *statusLine) Update(line string) {
	if s.tty {
		fmt.Fprintf(s.w, "\r\033[K%s", line)
		s.shown = true
		return
	}
	if now := time.Now(); now.Sub(s.last) >= plainEvery {
		s.last = now
		fmt.Fprintln(s.w, line)
	}
}

// Clear takes the redrawn line off the terminal, so that what is printed
// next starts a line of its own.
func (s *statusLine) Clear() {
	if s.tty && s.shown {
		fmt.Fprint(s.w, "\r\033[K")
		s.shown = false
	}
}

// Step prints line at once, on a line of its own.
func (s *statusLine) Step(line string) {
	s.Clear()
	fmt.Fprintln(s.w, line)
}

// timeLeft says how long a run has left ("" when unknown): of a time
// budget, the budget less what has passed; of a count to reach, the
// count left at the rate so far.
func timeLeft(budget, elapsed time.Duration, done, total int64) string {
	switch {
	case budget > 0:
		return "~" + shortDuration(max(budget-elapsed, 0)) + " left"
	case total > 0 && done > 0 && done < total && elapsed > 0:
		perItem := elapsed / time.Duration(done)
		return "~" + shortDuration(perItem*time.Duration(total-done)) + " left"
	}
	return ""
}

// shortDuration is d rounded for a progress line: seconds under ten
// minutes, else minutes.
func shortDuration(d time.Duration) string {
	if d < 10*time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
