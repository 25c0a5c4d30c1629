package kvm

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// consoleKeep is how many console lines are kept; consoleTail of them go
// into error messages.
const (
	consoleKeep = 400
	consoleTail = 40
	// maxConsoleLine is the most bytes of one line kept; the rest of a
	// longer line is counted, not kept.
	maxConsoleLine = 4096
)

// console collects what the guest writes on its serial console (COM1): it
// copies it to an optional writer, keeps the last lines for error messages,
// and signals when a line contains the wanted text. Write is called on the
// vCPU thread and never blocks on anything but w.
type console struct {
	w    io.Writer
	want string

	mu      sync.Mutex
	partial []byte
	skipped int // bytes of the partial line past maxConsoleLine
	lines   []string
	seen    chan struct{}
	found   bool
}

func newConsole(w io.Writer, want string) *console {
	return &console{w: w, want: want, seen: make(chan struct{})}
}

// Write implements io.Writer.
func (c *console) Write(p []byte) (int, error) {
	if c.w != nil {
		if _, err := c.w.Write(p); err != nil {
			c.w = nil // a failing copy is dropped, never the guest's output
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range p {
		switch b {
		case '\n':
			l := strings.TrimRight(string(c.partial), "\r")
			if c.skipped > 0 {
				l += fmt.Sprintf(" …(%d bytes skipped)", c.skipped)
			}
			c.line(l)
			c.partial, c.skipped = c.partial[:0], 0
		default:
			if len(c.partial) < maxConsoleLine {
				c.partial = append(c.partial, b)
			} else {
				c.skipped++
			}
		}
	}
	return len(p), nil
}

func (c *console) line(l string) {
	c.lines = append(c.lines, l)
	if len(c.lines) > consoleKeep {
		c.lines = c.lines[len(c.lines)-consoleKeep:]
	}
	if !c.found && c.want != "" && strings.Contains(l, c.want) {
		c.found = true
		close(c.seen)
	}
}

// tail returns the last lines, indented, for error messages.
func (c *console) tail() string { return c.last(consoleTail) }

// last returns the last n kept lines (and a partial one), indented.
func (c *console) last(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.lines[max(0, len(c.lines)-n):]
	if len(c.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(c.partial))
	}
	if len(lines) == 0 {
		return "  (no console output)"
	}
	return "  " + strings.Join(lines, "\n  ")
}

// text returns the last n kept lines (and a partial one), one per line,
// not indented ("" when there are none).
func (c *console) text(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.lines[max(0, len(c.lines)-n):]
	if len(c.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(c.partial))
	}
	return strings.Join(lines, "\n")
}

// contains reports whether any kept line contains s.
func (c *console) contains(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func (c *console) String() string { return fmt.Sprintf("console(%d lines)", len(c.lines)) }
