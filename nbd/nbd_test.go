package nbd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/themisfs/themis/overlay"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

var _ Backend = (*overlay.Device)(nil)
var _ Flusher = (*overlay.Device)(nil)

// memBackend is an in-memory Backend that records any access outside its bounds.
type memBackend struct {
	mu      sync.Mutex
	data    []byte
	oob     atomic.Int64 // out-of-bounds accesses
	flushes atomic.Int64
}

func newMem(size int) *memBackend { return &memBackend{data: make([]byte, size)} }

func (m *memBackend) Size() int64 { return int64(len(m.data)) }

func (m *memBackend) inBounds(n int, off int64) bool {
	if off < 0 || off > int64(len(m.data)) || int64(n) > int64(len(m.data))-off {
		m.oob.Add(1)
		return false
	}
	return true
}

func (m *memBackend) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.inBounds(len(p), off) {
		return 0, fmt.Errorf("read %d at %d out of bounds", len(p), off)
	}
	return copy(p, m.data[off:]), nil
}

func (m *memBackend) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.inBounds(len(p), off) {
		return 0, fmt.Errorf("write %d at %d out of bounds", len(p), off)
	}
	return copy(m.data[off:], p), nil
}

func (m *memBackend) Flush() error { m.flushes.Add(1); return nil }

func (m *memBackend) bytes(off, n int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return bytes.Clone(m.data[off : off+n])
}

// Wire builders for the client side.

func optionBytes(code uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, magicOpt)
	b = binary.BigEndian.AppendUint32(b, code)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

func infoData(name string, infos ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(infos)))
	for _, i := range infos {
		b = binary.BigEndian.AppendUint16(b, i)
	}
	return b
}

func requestBytes(flags, typ uint16, cookie, off uint64, length uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, magicRequest)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, cookie)
	b = binary.BigEndian.AppendUint64(b, off)
	return binary.BigEndian.AppendUint32(b, length)
}

func clientFlagsBytes(f uint32) []byte { return binary.BigEndian.AppendUint32(nil, f) }

// client is a minimal NBD client for tests.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

type optReply struct {
	opt, typ uint32
	data     []byte
}

// startConn serves a net.Pipe with srv and returns the client end and a
// channel with ServeConn's result.
func startConn(t *testing.T, srv *Server) (*client, <-chan error) {
	t.Helper()
	sc, cc := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(ctx, sc) }()
	t.Cleanup(func() {
		cancel()
		if err := cc.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	})
	if err := cc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &client{t: t, c: cc, r: bufio.NewReader(cc)}, done
}

func (cl *client) write(b []byte) {
	cl.t.Helper()
	if _, err := cl.c.Write(b); err != nil {
		cl.t.Fatalf("client write: %v", err)
	}
}

func (cl *client) read(n int) []byte {
	cl.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(cl.r, b); err != nil {
		cl.t.Fatalf("client read %d bytes: %v", n, err)
	}
	return b
}

// greet reads the server greeting and sends client flags.
func (cl *client) greet(flags uint32) {
	cl.t.Helper()
	g := cl.read(18)
	if got := binary.BigEndian.Uint64(g); got != magicInit {
		cl.t.Fatalf("init magic %#x", got)
	}
	if got := binary.BigEndian.Uint64(g[8:]); got != magicOpt {
		cl.t.Fatalf("opt magic %#x", got)
	}
	if got, want := binary.BigEndian.Uint16(g[16:]), flagFixedNewstyle|flagNoZeroes; got != want {
		cl.t.Fatalf("handshake flags %#x, want %#x", got, want)
	}
	cl.write(clientFlagsBytes(flags))
}

func (cl *client) optReply() optReply {
	cl.t.Helper()
	h := cl.read(20)
	if got := binary.BigEndian.Uint64(h); got != magicOptReply {
		cl.t.Fatalf("option reply magic %#x", got)
	}
	r := optReply{opt: binary.BigEndian.Uint32(h[8:]), typ: binary.BigEndian.Uint32(h[12:])}
	r.data = cl.read(int(binary.BigEndian.Uint32(h[16:])))
	return r
}

// goExport negotiates NBD_OPT_GO and returns the export size and flags.
func (cl *client) goExport(name string) (int64, uint16) {
	cl.t.Helper()
	cl.write(optionBytes(optGo, infoData(name, infoBlockSize)))
	var size int64 = -1
	var flags uint16
	for {
		r := cl.optReply()
		if r.opt != optGo {
			cl.t.Fatalf("reply for option %d, want %d", r.opt, optGo)
		}
		switch r.typ {
		case repAck:
			if size < 0 {
				cl.t.Fatal("NBD_OPT_GO acked without NBD_INFO_EXPORT")
			}
			return size, flags
		case repInfo:
			switch binary.BigEndian.Uint16(r.data) {
			case infoExport:
				size = int64(binary.BigEndian.Uint64(r.data[2:]))
				flags = binary.BigEndian.Uint16(r.data[10:])
			case infoBlockSize:
				minB, pref, maxB := binary.BigEndian.Uint32(r.data[2:]), binary.BigEndian.Uint32(r.data[6:]), binary.BigEndian.Uint32(r.data[10:])
				if minB != 1 || pref != 4096 || maxB != 32<<20 {
					cl.t.Errorf("block sizes %d/%d/%d, want 1/4096/32MiB", minB, pref, maxB)
				}
			}
		default:
			cl.t.Fatalf("NBD_OPT_GO reply type %#x", r.typ)
		}
	}
}

// do sends a request and reads the simple reply, returning errno and data.
func (cl *client) do(flags, typ uint16, cookie, off uint64, length uint32, payload []byte, readLen int) (uint32, []byte) {
	cl.t.Helper()
	cl.write(append(requestBytes(flags, typ, cookie, off, length), payload...))
	h := cl.read(16)
	if got := binary.BigEndian.Uint32(h); got != magicReply {
		cl.t.Fatalf("reply magic %#x", got)
	}
	if got := binary.BigEndian.Uint64(h[8:]); got != cookie {
		cl.t.Fatalf("reply cookie %d, want %d", got, cookie)
	}
	errno := binary.BigEndian.Uint32(h[4:])
	if errno != 0 || readLen == 0 {
		return errno, nil
	}
	return errno, cl.read(readLen)
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("ServeConn did not return")
		return nil
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	be := newMem(1 << 20)
	cl, done := startConn(t, &Server{Backend: be, Name: "disk0", Log: zaptest.NewLogger(t)})
	cl.greet(clientFlagFixedNewstyle | clientFlagNoZeroes)

	for _, tc := range []struct {
		name    string
		code    uint32
		data    []byte
		wantTyp []uint32
	}{
		{"structured reply", optStructuredRepl, nil, []uint32{repErrUnsup}},
		{"set meta context", optSetMetaContext, []byte{0, 0, 0, 0}, []uint32{repErrUnsup}},
		{"starttls", optStartTLS, nil, []uint32{repErrUnsup}},
		{"unknown option", 999, []byte("xyz"), []uint32{repErrUnsup}},
		{"list", optList, nil, []uint32{repServer, repAck}},
		{"list with data", optList, []byte{1}, []uint32{repErrInvalid}},
		{"info unknown export", optInfo, infoData("other"), []uint32{repErrUnknown}},
		{"info malformed", optInfo, []byte{0, 0, 0, 9, 'a'}, []uint32{repErrInvalid}},
		{"info trailing bytes", optInfo, append(infoData("disk0"), 0), []uint32{repErrInvalid}},
		{"info by name", optInfo, infoData("disk0", infoBlockSize), []uint32{repInfo, repInfo, repAck}},
		{"info default", optInfo, infoData(""), []uint32{repInfo, repInfo, repAck}},
		{"go unknown export", optGo, infoData("nope"), []uint32{repErrUnknown}},
	} {
		cl.write(optionBytes(tc.code, tc.data))
		for i, want := range tc.wantTyp {
			r := cl.optReply()
			if r.opt != tc.code || r.typ != want {
				t.Errorf("%s: reply %d = option %d type %#x, want option %d type %#x", tc.name, i, r.opt, r.typ, tc.code, want)
			}
			if r.typ == repServer {
				if got := string(r.data[4:]); got != "disk0" {
					t.Errorf("%s: listed %q, want disk0", tc.name, got)
				}
			}
		}
	}

	size, flags := cl.goExport("disk0")
	if size != 1<<20 {
		t.Errorf("export size %d, want %d", size, 1<<20)
	}
	if want := tflagHasFlags | tflagSendFlush | tflagSendWriteZeroes; flags != want {
		t.Errorf("transmission flags %#x, want %#x", flags, want)
	}
	cl.write(requestBytes(0, cmdDisc, 1, 0, 0))
	if err := waitDone(t, done); err != nil {
		t.Errorf("ServeConn after DISC = %v", err)
	}
}

func TestExportName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		flags     uint32
		export    string
		wantZeros int
		wantErr   bool
	}{
		{"no zeroes", clientFlagFixedNewstyle | clientFlagNoZeroes, "", 0, false},
		{"zeroes", clientFlagFixedNewstyle, "disk0", 124, false},
		{"unknown name", clientFlagFixedNewstyle, "bogus", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cl, done := startConn(t, &Server{Backend: newMem(4096), Name: "disk0", Log: zaptest.NewLogger(t)})
			cl.greet(tc.flags)
			cl.write(optionBytes(optExportName, []byte(tc.export)))
			if tc.wantErr {
				if err := waitDone(t, done); err == nil {
					t.Error("ServeConn accepted an unknown export name")
				}
				return
			}
			b := cl.read(10 + tc.wantZeros)
			if got := binary.BigEndian.Uint64(b); got != 4096 {
				t.Errorf("size %d, want 4096", got)
			}
			if !bytes.Equal(b[10:], make([]byte, tc.wantZeros)) {
				t.Error("padding is not zero")
			}
			if errno, _ := cl.do(0, cmdFlush, 7, 0, 0, nil, 0); errno != 0 {
				t.Errorf("flush errno %d", errno)
			}
			cl.write(requestBytes(0, cmdDisc, 8, 0, 0))
			if err := waitDone(t, done); err != nil {
				t.Errorf("ServeConn = %v", err)
			}
		})
	}
}

func TestHandshakeFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		input   []byte
		wantErr error // nil: a clean end
	}{
		{"unknown client flag", clientFlagsBytes(clientFlagFixedNewstyle | 1<<5), ErrProtocol},
		{"not fixed newstyle", clientFlagsBytes(0), ErrProtocol},
		{"bad option magic", append(clientFlagsBytes(1), make([]byte, 16)...), ErrProtocol},
		{"option too long", append(append(clientFlagsBytes(1), optionBytes(optList, nil)[:12]...), 0, 0x10, 0, 0), ErrProtocol},
		{"abort", append(clientFlagsBytes(1), optionBytes(optAbort, nil)...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cl, done := startConn(t, &Server{Backend: newMem(4096), Log: zaptest.NewLogger(t)})
			cl.read(18)
			cl.write(tc.input)
			if tc.name == "abort" {
				if r := cl.optReply(); r.typ != repAck {
					t.Errorf("abort reply type %#x", r.typ)
				}
			}
			err := waitDone(t, done)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("ServeConn = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestTransmission(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	be := newMem(size)
	cl, done := startConn(t, &Server{Backend: be, Log: zaptest.NewLogger(t)})
	cl.greet(clientFlagFixedNewstyle | clientFlagNoZeroes)
	cl.goExport("")

	pattern := bytes.Repeat([]byte{0x55}, 8192)
	ones := bytes.Repeat([]byte{0xff}, 4096)
	for i, tc := range []struct {
		name      string
		flags     uint16
		typ       uint16
		off       uint64
		length    uint32
		payload   []byte
		wantErrno uint32
		wantData  []byte
	}{
		{name: "write", typ: cmdWrite, off: 4096, length: 8192, payload: pattern},
		{name: "read back", typ: cmdRead, off: 4096, length: 8192, wantData: pattern},
		{name: "unaligned read", typ: cmdRead, off: 4095, length: 3, wantData: []byte{0, 0x55, 0x55}},
		{name: "write fua", flags: cmdFlagFUA, typ: cmdWrite, off: size - 4096, length: 4096, payload: ones},
		{name: "read last block", typ: cmdRead, off: size - 4096, length: 4096, wantData: ones},
		{name: "write zeroes", typ: cmdWriteZeroes, off: 4096, length: 4096},
		{name: "read zeroed", typ: cmdRead, off: 4096, length: 8192, wantData: append(make([]byte, 4096), pattern[:4096]...)},
		{name: "flush", typ: cmdFlush},
		{name: "read past end", typ: cmdRead, off: size - 1, length: 2, wantErrno: errnoInval},
		{name: "read huge offset", typ: cmdRead, off: 1 << 63, length: 1, wantErrno: errnoInval},
		{name: "read too long", typ: cmdRead, off: 0, length: MaxPayload + 1, wantErrno: errnoInval},
		{name: "read zero length", typ: cmdRead, off: 0, length: 0, wantErrno: errnoInval},
		{name: "write past end", typ: cmdWrite, off: size - 1, length: 2, payload: []byte{1, 2}, wantErrno: errnoNoSpc},
		{name: "write offset overflow", typ: cmdWrite, off: ^uint64(0), length: 4, payload: []byte{1, 2, 3, 4}, wantErrno: errnoNoSpc},
		{name: "write zeroes past end", typ: cmdWriteZeroes, off: size, length: 1, wantErrno: errnoNoSpc},
		{name: "trim unsupported", typ: 4, off: 0, length: 4096, wantErrno: errnoInval},
		{name: "unknown command", typ: 77, wantErrno: errnoInval},
		{name: "still alive", typ: cmdRead, off: size - 4096, length: 4096, wantData: ones},
	} {
		cookie := uint64(1000 + i)
		errno, data := cl.do(tc.flags, tc.typ, cookie, tc.off, tc.length, tc.payload, len(tc.wantData))
		if errno != tc.wantErrno {
			t.Errorf("%s: errno %d, want %d", tc.name, errno, tc.wantErrno)
		}
		if !bytes.Equal(data, tc.wantData) {
			t.Errorf("%s: data differs", tc.name)
		}
	}
	if got := be.flushes.Load(); got != 2 {
		t.Errorf("backend flushed %d times, want 2 (FUA write and FLUSH)", got)
	}
	if got := be.bytes(size-4096, 4096); !bytes.Equal(got, ones) {
		t.Error("backend does not hold the FUA write")
	}
	if got := be.bytes(size-1, 1); got[0] != 0xff {
		t.Error("rejected write touched the backend")
	}
	if n := be.oob.Load(); n != 0 {
		t.Errorf("%d out-of-bounds backend accesses", n)
	}
	cl.write(requestBytes(0, cmdDisc, 1, 0, 0))
	if err := waitDone(t, done); err != nil {
		t.Errorf("ServeConn after DISC = %v", err)
	}
}

func TestOversizedWriteCloses(t *testing.T) {
	t.Parallel()
	cl, done := startConn(t, &Server{Backend: newMem(4096), Log: zaptest.NewLogger(t)})
	cl.greet(clientFlagFixedNewstyle)
	cl.goExport("")
	cl.write(requestBytes(0, cmdWrite, 1, 0, MaxPayload+1))
	if err := waitDone(t, done); !errors.Is(err, ErrProtocol) {
		t.Errorf("ServeConn = %v, want ErrProtocol", err)
	}
}

type failingBackend struct{ memBackend }

func (f *failingBackend) ReadAt([]byte, int64) (int, error)  { return 0, errors.New("disk on fire") }
func (f *failingBackend) WriteAt([]byte, int64) (int, error) { return 0, errors.New("disk on fire") }
func (f *failingBackend) Flush() error                       { return errors.New("disk on fire") }

func TestBackendErrors(t *testing.T) {
	t.Parallel()
	cl, done := startConn(t, &Server{Backend: &failingBackend{memBackend{data: make([]byte, 8192)}}, Log: zaptest.NewLogger(t)})
	cl.greet(clientFlagFixedNewstyle)
	cl.goExport("")
	for _, tc := range []struct {
		typ     uint16
		length  uint32
		payload []byte
	}{{cmdRead, 512, nil}, {cmdWrite, 4, []byte{1, 2, 3, 4}}, {cmdWriteZeroes, 512, nil}, {cmdFlush, 0, nil}} {
		if errno, _ := cl.do(0, tc.typ, 9, 0, tc.length, tc.payload, 0); errno != errnoIO {
			t.Errorf("command %d: errno %d, want EIO", tc.typ, errno)
		}
	}
	cl.write(requestBytes(0, cmdDisc, 1, 0, 0))
	if err := waitDone(t, done); err != nil {
		t.Errorf("ServeConn = %v", err)
	}
}

// TestOverlayBackend serves an overlay.Device and checks writes land in its
// top layer and that Pop undoes them.
func TestOverlayBackend(t *testing.T) {
	t.Parallel()
	base := bytes.Repeat([]byte{0xaa}, 64<<10)
	dev, err := overlay.New(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	dev.Push()
	cl, done := startConn(t, &Server{Backend: dev, Log: zaptest.NewLogger(t)})
	cl.greet(clientFlagFixedNewstyle)
	cl.goExport("")
	if errno, _ := cl.do(cmdFlagFUA, cmdWrite, 1, 1000, 100, bytes.Repeat([]byte{1}, 100), 0); errno != 0 {
		t.Fatalf("write errno %d", errno)
	}
	if errno, data := cl.do(0, cmdRead, 2, 512, 1024, nil, 1024); errno != 0 || data[1000-512] != 1 || data[0] != 0xaa {
		t.Fatalf("read errno %d", errno)
	}
	if got, want := dev.WriteSet(), []uint64{1, 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("WriteSet = %v, want %v", got, want)
	}
	cl.write(requestBytes(0, cmdDisc, 3, 0, 0))
	if err := waitDone(t, done); err != nil {
		t.Errorf("ServeConn = %v", err)
	}
	if err := dev.Pop(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := dev.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), base) {
		t.Error("image after Pop differs from base")
	}
}

// shortTempDir returns a directory whose paths fit in a sockaddr_un.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

func TestListen(t *testing.T) {
	t.Parallel()
	dir := shortTempDir(t)
	path := filepath.Join(dir, "s.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want socket 0600", fi.Mode())
	}
	// Leave a stale socket behind: a listener whose file outlives it.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left after Close: %v", err)
	}

	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(regular); !errors.Is(err, os.ErrExist) {
		t.Errorf("Listen over a regular file = %v, want ErrExist", err)
	}
	if b, err := os.ReadFile(regular); err != nil || string(b) != "keep" {
		t.Errorf("regular file changed: %q, %v", b, err)
	}
}

// TestServeNoLeak runs Serve with live connections (mid-handshake and
// mid-transmission), cancels it and checks every goroutine is gone.
func TestServeNoLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(shortTempDir(t), "s.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	be := newMem(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- (&Server{Backend: be, Log: zaptest.NewLogger(t)}).Serve(ctx, l) }()

	var conns []net.Conn
	for i := range 3 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i == 0 {
			continue // stays in the handshake
		}
		cl := &client{t: t, c: c, r: bufio.NewReader(c)}
		if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		cl.greet(clientFlagFixedNewstyle | clientFlagNoZeroes)
		cl.goExport("")
		if errno, _ := cl.do(0, cmdWrite, 1, uint64(i)*4096, 4, []byte{1, 2, 3, byte(i)}, 0); errno != 0 {
			t.Fatalf("write errno %d", errno)
		}
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	for _, c := range conns {
		// Drain what the server sent; the stream must end in EOF, not time out.
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("connection not closed by Serve: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left after Serve: %v", err)
	}
	if got := be.bytes(4096, 4); !bytes.Equal(got, []byte{1, 2, 3, 1}) {
		t.Errorf("backend holds %v", got)
	}
}

// TestServeListenerClosed checks Serve returns nil when its listener is
// closed by someone else.
func TestServeListenerClosed(t *testing.T) {
	t.Parallel()
	l, err := Listen(filepath.Join(shortTempDir(t), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- (&Server{Backend: newMem(512)}).Serve(context.Background(), l) }()
	time.Sleep(10 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the listener closed")
	}
}
