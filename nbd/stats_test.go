package nbd

import (
	"bytes"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"
)

// TestCounts serves a sequence of requests and checks the counters against
// a count kept by the test (the naive model): per command the requests and
// bytes, rejected ones apart, the disconnect not counted.
func TestCounts(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	srv := &Server{Backend: newMem(size), Log: zaptest.NewLogger(t)}
	if got := srv.Counts(); got != (Counts{}) {
		t.Fatalf("a new server's counts = %+v, want zero", got)
	}
	cl, done := startConn(t, srv)
	cl.greet(clientFlagFixedNewstyle | clientFlagNoZeroes)
	cl.goExport("")

	// Read the counters all along, as a run does while the guest works.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = srv.Counts()
			}
		}
	})

	var want Counts
	for i, tc := range []struct {
		typ     uint16
		flags   uint16
		off     uint64
		length  uint32
		payload []byte
		readLen int
		reject  bool
	}{
		{typ: cmdWrite, off: 0, length: 8192, payload: bytes.Repeat([]byte{1}, 8192)},
		{typ: cmdWrite, flags: cmdFlagFUA, off: 8192, length: 512, payload: make([]byte, 512)},
		{typ: cmdRead, off: 0, length: 4096, readLen: 4096},
		{typ: cmdRead, off: 100, length: 3, readLen: 3},
		{typ: cmdWriteZeroes, off: 0, length: 65536},
		{typ: cmdFlush},
		{typ: cmdRead, off: size, length: 1, reject: true},
		{typ: cmdWrite, off: size - 1, length: 2, payload: []byte{1, 2}, reject: true},
		{typ: 4 /* trim */, off: 0, length: 4096, reject: true},
	} {
		cl.do(tc.flags, tc.typ, uint64(i), tc.off, tc.length, tc.payload, tc.readLen)
		n := int64(tc.length)
		switch {
		case tc.reject:
			want.Rejected++
		case tc.typ == cmdRead:
			want.Reads, want.ReadBytes = want.Reads+1, want.ReadBytes+n
		case tc.typ == cmdWrite:
			want.Writes, want.WriteBytes = want.Writes+1, want.WriteBytes+n
		case tc.typ == cmdWriteZeroes:
			want.WriteZeroes, want.WriteZeroesBytes = want.WriteZeroes+1, want.WriteZeroesBytes+n
		case tc.typ == cmdFlush:
			want.Flushes++
		}
	}
	cl.write(requestBytes(0, cmdDisc, 99, 0, 0))
	if err := waitDone(t, done); err != nil {
		t.Errorf("ServeConn after DISC = %v", err)
	}
	close(stop)
	wg.Wait()

	got := srv.Counts()
	if got.Serve <= 0 {
		t.Errorf("serve time %v, want > 0", got.Serve)
	}
	got.Serve = 0
	if got != want {
		t.Errorf("counts = %+v, want %+v", got, want)
	}
	if got, want := got.Requests(), int64(9); got != want {
		t.Errorf("Requests() = %d, want %d", got, want)
	}
}

func TestCountsArithmetic(t *testing.T) {
	t.Parallel()
	a := Counts{Reads: 5, ReadBytes: 5 << 12, Writes: 3, WriteBytes: 3 << 12, WriteZeroes: 1, WriteZeroesBytes: 4096, Flushes: 2, Rejected: 1, Serve: 7}
	b := Counts{Reads: 2, ReadBytes: 2 << 12, Writes: 1, WriteBytes: 1 << 12, Flushes: 1, Serve: 3}
	for _, tc := range []struct {
		name      string
		got, want Counts
	}{
		{"sub", a.Sub(b), Counts{Reads: 3, ReadBytes: 3 << 12, Writes: 2, WriteBytes: 2 << 12, WriteZeroes: 1, WriteZeroesBytes: 4096, Flushes: 1, Rejected: 1, Serve: 4}},
		{"add back", a.Sub(b).Add(b), a},
		{"sub self", a.Sub(a), Counts{}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}
