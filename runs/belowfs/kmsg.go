package belowfs

import (
	"fmt"
	"unicode/utf8"
)

// Bounds of one drain of the guest's kernel log (corrupter.kmsg). The
// kernel's ring buffer holds far less than maxKmsgCalls full responses
// (the agent sends at most 1000 records each), so an honest log ends
// first.
const (
	maxKmsgCalls = 32   // Kmsg calls per drain
	maxKmsgKeep  = 200  // lines kept per drain: the first half and the last half
	maxKmsgLine  = 1024 // bytes kept per line (the kernel's records are shorter)
)

// kmsgKeep keeps the lines of one drain within bounds: the first
// maxKmsgKeep/2 (where a flip's first complaints are), the last
// maxKmsgKeep/2, each cut to maxKmsgLine bytes, and a count of the
// dropped ones in between.
type kmsgKeep struct {
	head    []string
	tail    []string // a ring of maxKmsgKeep/2 once full; next is its oldest
	next    int
	dropped int
	more    bool // the drain stopped at maxKmsgCalls with lines left
}

// add keeps one line.
func (k *kmsgKeep) add(text string) {
	text = cutLine(text, maxKmsgLine)
	half := maxKmsgKeep / 2
	switch {
	case len(k.head) < half:
		k.head = append(k.head, text)
	case len(k.tail) < half:
		k.tail = append(k.tail, text)
	default:
		k.tail[k.next] = text
		k.next = (k.next + 1) % half
		k.dropped++
	}
}

// lines returns the kept lines in order, with a line saying what was
// dropped or left unread where anything was.
func (k *kmsgKeep) lines() []string {
	out := append([]string(nil), k.head...)
	if k.dropped > 0 || k.more {
		note := fmt.Sprintf("themis: %d kernel log lines dropped here", k.dropped)
		if k.more {
			note += fmt.Sprintf("; more left unread after %d calls", maxKmsgCalls)
		}
		out = append(out, note)
	}
	out = append(out, k.tail[k.next:]...)
	return append(out, k.tail[:k.next]...)
}

// cutLine returns s cut to at most n bytes on a rune boundary, marked with
// how many bytes were skipped, or s when it fits.
func cutLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf(" …(%d bytes skipped)", len(s)-i)
}
