package nested

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
)

// StepMark starts the lines the init prints on the console around each
// step: "themis-nested-step: start NAME" and "themis-nested-step: end NAME".
// The host tells from them which step the console's lines belong to.
const StepMark = "themis-nested-step:"

// StartLine and EndLine are the init's step marks.
func StartLine(step string) string { return fmt.Sprintf("%s start %s\n", StepMark, step) }

// EndLine is the mark after a step.
func EndLine(step string) string { return fmt.Sprintf("%s end %s\n", StepMark, step) }

// maxSegment bounds the console kept per step (its last bytes).
const maxSegment = 64 << 10

// maxLineLen bounds a console line held while waiting for its newline.
const maxLineLen = 64 << 10

// Hit is the first emulated-host signature seen on the console.
type Hit struct {
	Signature Signature `json:"signature"`
	Line      string    `json:"line"`
	Step      string    `json:"step,omitempty"` // the step running then, "" between steps
}

// Watcher reads the emulated host's console as it is written (an
// io.Writer), keeps each step's part of it, and reports the first line
// that is the host kernel's own signature (HostLine) to onHit, once.
// Safe for concurrent use.
type Watcher struct {
	mu        sync.Mutex
	partial   []byte
	running   string
	ran       []string
	segs      map[string][]byte
	hit       *Hit
	onHit     func(Hit)
	now       func() time.Time // time.Now; tests set it
	stepStart time.Time        // when the running step's start mark came
	lastWrite time.Time        // when the console last had bytes
}

// NewWatcher returns a Watcher that calls onHit (may be nil) on the first
// signature, from Write's goroutine (or Stalled's).
func NewWatcher(onHit func(Hit)) *Watcher {
	return &Watcher{segs: map[string][]byte{}, onHit: onHit, now: time.Now}
}

// Write implements io.Writer; it never fails.
func (w *Watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.lastWrite = w.now()
	var fire *Hit
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			w.partial = append(w.partial, rest...)
			if len(w.partial) > maxLineLen { // a runaway line: judge it as it is
				fire = firstHit(fire, w.line(w.partial))
				w.partial = w.partial[:0]
			}
			break
		}
		line := append(w.partial, rest[:i+1]...)
		fire = firstHit(fire, w.line(line))
		w.partial = w.partial[:0]
		rest = rest[i+1:]
	}
	w.mu.Unlock()
	if fire != nil && w.onHit != nil {
		w.onHit(*fire)
	}
	return len(p), nil
}

func firstHit(a, b *Hit) *Hit {
	if a != nil {
		return a
	}
	return b
}

// line takes one whole line; it returns the hit to report, if this is the first.
func (w *Watcher) line(line []byte) *Hit {
	if i := bytes.Index(line, []byte(StepMark)); i >= 0 {
		f := strings.Fields(string(line[i+len(StepMark):]))
		if len(f) == 2 && f[0] == "start" {
			w.running, w.stepStart = f[1], w.lastWrite
			w.ran = append(w.ran, f[1])
			w.segs[f[1]] = nil
			return nil
		}
		if len(f) == 2 && f[0] == "end" && f[1] == w.running {
			w.running = ""
			return nil
		}
	}
	if w.running != "" {
		seg := append(w.segs[w.running], line...)
		if len(seg) > maxSegment {
			seg = append([]byte(nil), seg[len(seg)-maxSegment:]...)
		}
		w.segs[w.running] = seg
	}
	if w.hit != nil {
		return nil
	}
	if sig := HostLine(line); sig != None {
		w.hit = &Hit{Signature: sig, Line: strings.TrimSpace(string(line)), Step: w.running}
		return w.hit
	}
	return nil
}

// Stalled reports the emulated host's own stop (HostStalled) when the
// running step has outlived its timeout (its own: the init kills it then,
// by the host's clock, and prints the end mark) by grace, and nothing has
// come on the console for grace either: the host's clock has stopped.
// Seen 2026-12-03, twice in four jobs: the console silent mid-step for 15
// minutes, QEMU's vCPU threads busy, its main loop idle. Like a signature
// on the console, the first one (of any kind) is recorded and reported to
// onHit, once; Stalled returns whether this call found it.
func (w *Watcher) Stalled(timeout func(step string) time.Duration, grace time.Duration) (Hit, bool) {
	w.mu.Lock()
	now := w.now()
	if w.hit != nil || w.running == "" || now.Sub(w.stepStart) <= timeout(w.running)+grace || now.Sub(w.lastWrite) <= grace {
		w.mu.Unlock()
		return Hit{}, false
	}
	w.hit = &Hit{Signature: HostStalled, Step: w.running, Line: fmt.Sprintf("step %s running %v, past its timeout %v, the console silent for %v",
		w.running, now.Sub(w.stepStart).Round(time.Second), timeout(w.running), now.Sub(w.lastWrite).Round(time.Second))}
	h := *w.hit
	w.mu.Unlock()
	if w.onHit != nil {
		w.onHit(h)
	}
	return h, true
}

// Hit returns the first signature seen, if any.
func (w *Watcher) Hit() (Hit, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hit == nil {
		return Hit{}, false
	}
	return *w.hit, true
}

// Running is the step started and not ended, or "".
func (w *Watcher) Running() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running
}

// Started lists the steps whose start mark was seen, in order.
func (w *Watcher) Started() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ran...)
}

// Segment is the console while step ran (its last maxSegment bytes),
// including a line still missing its newline if it is running.
func (w *Watcher) Segment(step string) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := append([]byte(nil), w.segs[step]...)
	if step == w.running {
		s = append(s, w.partial...)
	}
	return s
}
