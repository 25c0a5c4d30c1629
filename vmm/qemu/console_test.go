package qemu

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestConsoleTailBounded: the console reader keeps reading past a line of
// any length (it keeps the line's first maxConsoleLine bytes), sees the
// ready line after it, and keeps at most consoleKeep lines of bounded
// length, whatever the guest prints.
func TestConsoleTailBounded(t *testing.T) {
	t.Parallel()
	ready := readyLine + " on /dev/vport1p1\n"
	cases := []struct {
		name      string
		input     string
		wantPath  string // "" : no ready line expected
		wantTail  string // the tail contains it
		wantLines int    // lines kept
	}{
		{"short lines", "a\nb\n" + ready + "after\n", "/dev/vport1p1", "after", 4},
		{"1 MiB line first", strings.Repeat("x", 1<<20) + "\n" + ready + "after\n", "/dev/vport1p1", "after", 3},
		{"4 MiB line first", strings.Repeat("x", 4<<20) + "\r\n" + ready + "after\n", "/dev/vport1p1", "after", 3},
		{"ready line after a long prefix", strings.Repeat("y", 2<<20) + ready, "", "yyy", 1},
		{"no newline ever", strings.Repeat("z", 3<<20), "", "zzz", 1},
		{"many lines", strings.Repeat("line\n", 10000) + ready + "last\n", "/dev/vport1p1", "last", consoleKeep},
		{"many long lines", strings.Repeat(strings.Repeat("w", 100<<10)+"\n", 100) + "end\n", "", "end", min(101, consoleKeep)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var copied bytes.Buffer
			c := newConsoleTail(&copied)
			c.run(io.NopCloser(strings.NewReader(tc.input)))
			select {
			case <-c.ready:
				if tc.wantPath == "" {
					t.Errorf("ready signalled, want none")
				}
			default:
				if tc.wantPath != "" {
					t.Fatalf("no ready line seen; tail:\n%.300s", c.tail())
				}
			}
			if got := c.readyPath(); got != tc.wantPath {
				t.Errorf("ready path %q, want %q", got, tc.wantPath)
			}
			tail := c.tail()
			if !strings.Contains(tail, tc.wantTail) {
				t.Errorf("tail lacks %q:\n%.300s", tc.wantTail, tail)
			}
			c.mu.Lock()
			n := len(c.lines)
			c.mu.Unlock()
			if n != tc.wantLines {
				t.Errorf("%d lines kept, want %d", n, tc.wantLines)
			}
			if max := (consoleKeep + 1) * (maxConsoleLine + 64); len(tail) > max {
				t.Errorf("tail of %d bytes, want at most %d", len(tail), max)
			}
			if max := len(tc.input)/maxConsoleLine*(maxConsoleLine+64) + len(tc.input); copied.Len() > max {
				t.Errorf("copied %d bytes of %d", copied.Len(), len(tc.input))
			}
		})
	}
}

// FuzzReadConsoleLine: whatever the guest prints, every line comes back
// without a newline, at most maxConsoleLine bytes and a mark long, and the
// lines are as many as the input's newlines (one more for an unterminated
// last line); a line that fits comes back whole.
func FuzzReadConsoleLine(f *testing.F) {
	f.Add([]byte("a\r\nb\n" + readyLine + " on /dev/ttyS1\n"))
	f.Add(bytes.Repeat([]byte("x"), maxConsoleLine+1))
	f.Add(append(bytes.Repeat([]byte("y"), 3*maxConsoleLine), "\r\n\n\r"...))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), maxConsoleLine)
		want := bytes.Split(in, []byte("\n"))
		if len(want[len(want)-1]) == 0 {
			want = want[:len(want)-1]
		}
		for i := 0; ; i++ {
			line, err := readConsoleLine(br)
			if err != nil {
				if i != len(want) {
					t.Fatalf("%d lines, want %d", i, len(want))
				}
				return
			}
			if i >= len(want) {
				t.Fatalf("line %d %q past the %d in the input", i, line, len(want))
			}
			if strings.Contains(line, "\n") || len(line) > maxConsoleLine+len(" …(18446744073709551615 bytes skipped)") {
				t.Fatalf("line %d: %d bytes, or a newline in it", i, len(line))
			}
			if w := strings.TrimRight(string(want[i]), "\r"); len(want[i]) <= maxConsoleLine && line != w {
				t.Fatalf("line %d = %q, want %q", i, line, w)
			}
		}
	})
}

// TestConsoleTextAndTail: a dead guest's error carries every kept line
// (text), its message the last consoleShown of them (tail).
func TestConsoleTextAndTail(t *testing.T) {
	t.Parallel()
	c := newConsoleTail(nil)
	var in strings.Builder
	for i := range consoleKeep + 10 {
		fmt.Fprintf(&in, "line %d\n", i)
	}
	c.run(io.NopCloser(strings.NewReader(in.String())))
	text := strings.Split(c.text(), "\n")
	if len(text) != consoleKeep || text[0] != "line 10" || text[len(text)-1] != fmt.Sprintf("line %d", consoleKeep+9) {
		t.Errorf("text: %d lines, %q .. %q", len(text), text[0], text[len(text)-1])
	}
	if tail := strings.Split(c.tail(), "\n"); len(tail) != consoleShown {
		t.Errorf("tail: %d lines, want %d", len(tail), consoleShown)
	}
}
