package kvm

import (
	"strings"
	"testing"
)

// TestConsoleBounded: the KVM console keeps at most consoleKeep lines of
// at most maxConsoleLine bytes each (a longer one marked with what was
// skipped), and sees the wanted text on a line after one of any length.
func TestConsoleBounded(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		writes    []string
		wantSeen  bool
		wantTail  string
		wantLines int
	}{
		{"short", []string{"a\n", "ready\n"}, true, "ready", 2},
		{"1 MiB line first", []string{strings.Repeat("x", 1<<20) + "\n", "ready\r\n"}, true, "bytes skipped)", 2},
		{"long line in pieces", []string{strings.Repeat("x", 3000), strings.Repeat("x", 3000), "\nready\n"}, true, "(1904 bytes skipped)", 2},
		{"many lines", []string{strings.Repeat("line\n", 5000)}, false, "line", consoleKeep},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newConsole(nil, "ready")
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("write = %d, %v", n, err)
				}
			}
			select {
			case <-c.seen:
				if !tc.wantSeen {
					t.Error("wanted text seen, want not")
				}
			default:
				if tc.wantSeen {
					t.Error("wanted text not seen")
				}
			}
			tail := c.last(consoleKeep)
			if !strings.Contains(tail, tc.wantTail) {
				t.Errorf("tail lacks %q:\n%.300s", tc.wantTail, tail)
			}
			if len(c.lines) != tc.wantLines {
				t.Errorf("%d lines kept, want %d", len(c.lines), tc.wantLines)
			}
			for _, l := range c.lines {
				if len(l) > maxConsoleLine+64 {
					t.Errorf("a line of %d bytes kept", len(l))
				}
			}
		})
	}
}
