package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestStatusLine: on a terminal progress redraws one line and a step
// clears it first; elsewhere progress is a plain line at most every
// plainEvery, steps every time.
func TestStatusLine(t *testing.T) {
	var tty bytes.Buffer
	s := &statusLine{w: &tty, tty: true}
	s.Update("a")
	s.Update("b")
	s.Step("part done")
	s.Clear() // nothing shown: nothing to clear
	if got, want := tty.String(), "\r\033[Ka\r\033[Kb\r\033[Kpart done\n"; got != want {
		t.Errorf("terminal: %q, want %q", got, want)
	}
	var log bytes.Buffer
	p := &statusLine{w: &log}
	p.Update("first")
	p.Update("second, too soon")
	p.Step("a step")
	p.last = time.Now().Add(-plainEvery)
	p.Update("third")
	if got, want := log.String(), "first\na step\nthird\n"; got != want {
		t.Errorf("log: %q, want %q", got, want)
	}
	if strings.Contains(log.String(), "\r") {
		t.Error("a plain log holds a carriage return")
	}
}

// TestTimeLeft: a budget's rest, a count's rest at the rate so far, and
// nothing where neither is known.
func TestTimeLeft(t *testing.T) {
	for _, tt := range []struct {
		budget, elapsed time.Duration
		done, total     int64
		want            string
	}{
		{10 * time.Minute, 4 * time.Minute, 0, 0, "~6m0s left"},
		{time.Minute, 2 * time.Minute, 0, 0, "~0s left"},
		{0, 10 * time.Minute, 2, 10, "~40m0s left"},
		{0, 30 * time.Second, 3, 4, "~10s left"},
		{0, time.Minute, 0, 10, ""},
		{0, time.Minute, 10, 10, ""},
		{0, time.Minute, 5, 0, ""},
	} {
		if got := timeLeft(tt.budget, tt.elapsed, tt.done, tt.total); got != tt.want {
			t.Errorf("timeLeft(%v, %v, %d, %d) = %q, want %q", tt.budget, tt.elapsed, tt.done, tt.total, got, tt.want)
		}
	}
}
