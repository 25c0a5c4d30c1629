package sandbox

import "fmt"

// capped keeps the first and the last half bytes written to it and counts
// the rest; it never fails a write, so the tool is never blocked on a full
// pipe.
type capped struct {
	half int
	head []byte
	tail []byte // at most 2*half, trimmed to half when read
	cut  int64  // bytes dropped from the middle
}

// Write implements io.Writer.
func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.half - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	if len(c.tail) > 2*c.half {
		drop := len(c.tail) - c.half
		c.cut += int64(drop)
		c.tail = append(c.tail[:0], c.tail[drop:]...)
	}
	return n, nil
}

// bytes is what was kept, a mark where the middle was cut.
func (c *capped) bytes() []byte {
	if len(c.tail) > c.half {
		drop := len(c.tail) - c.half
		c.cut += int64(drop)
		c.tail = c.tail[drop:]
	}
	out := append([]byte(nil), c.head...)
	if c.cut > 0 {
		out = append(out, fmt.Sprintf("\n[... %d bytes of output cut ...]\n", c.cut)...)
	}
	return append(out, c.tail...)
}
