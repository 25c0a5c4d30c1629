package devices

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
)

// fakeIRQ records every SetLevel call.
type fakeIRQ struct {
	mu    sync.Mutex
	calls []bool
	err   error // returned (once) by the next SetLevel
}

func (f *fakeIRQ) SetLevel(high bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		err := f.err
		f.err = nil
		return err
	}
	f.calls = append(f.calls, high)
	return nil
}

// level is the line's current level (low before any call).
func (f *fakeIRQ) level() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls) > 0 && f.calls[len(f.calls)-1]
}

func (f *fakeIRQ) history() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.calls...)
}

// checkTransitions fails if SetLevel was called twice in a row with the
// same level, or first with low (devices set the line only on a change; not
// for a fake that saw SetState, which sets it unconditionally).
func (f *fakeIRQ) checkTransitions(t testing.TB) {
	t.Helper()
	h := f.history()
	for i := 1; i < len(h); i++ {
		if h[i] == h[i-1] {
			t.Fatalf("SetLevel(%v) twice in a row (calls %v)", h[i], h)
		}
	}
	if len(h) > 0 && !h[0] {
		t.Fatalf("first SetLevel call lowers a line that is already low (calls %v)", h)
	}
}

// memBackend is a Backend over a byte slice.
type memBackend struct {
	mu       sync.Mutex
	data     []byte
	flushes  int
	readErr  error
	writeErr error
	flushErr error
	// t gets an error for any access outside the disk (which a Block must
	// never make).
	t testing.TB
}

func newMemBackend(t testing.TB, size int) *memBackend {
	return &memBackend{data: make([]byte, size), t: t}
}

func (m *memBackend) Size() int64 { return int64(len(m.data)) }

func (m *memBackend) check(op string, p []byte, off int64) {
	if off < 0 || off > int64(len(m.data)) || int64(len(p)) > int64(len(m.data))-off {
		m.t.Errorf("backend %s of %d bytes at %d outside a %d-byte disk", op, len(p), off, len(m.data))
	}
}

func (m *memBackend) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.check("read", p, off)
	if m.readErr != nil {
		return 0, m.readErr
	}
	if off >= int64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memBackend) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.check("write", p, off)
	if m.writeErr != nil {
		return 0, m.writeErr
	}
	if off < 0 || off > int64(len(m.data)) || int64(len(p)) > int64(len(m.data))-off {
		return 0, errors.New("write past end")
	}
	return copy(m.data[off:], p), nil
}

func (m *memBackend) Flush() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushes++
	return m.flushErr
}

func (m *memBackend) snapshot() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.data...)
}

// guardedRAM returns RAM of size bytes inside a buffer with guard bytes on
// both sides, and a check that the guards are intact.
func guardedRAM(size int) (RAM, func(testing.TB)) {
	const guard = 4096
	buf := make([]byte, guard+size+guard)
	for i := range buf {
		buf[i] = 0xa5
	}
	ram := RAM(buf[guard : guard+size : guard+size])
	clear(ram)
	return ram, func(t testing.TB) {
		t.Helper()
		for i := range guard {
			if buf[i] != 0xa5 || buf[guard+size+i] != 0xa5 {
				t.Fatalf("a device wrote outside RAM")
			}
		}
	}
}

// errWriter fails every write.
type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("full") }
