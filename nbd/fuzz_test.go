package nbd

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
)

const fuzzExportSize = 64 << 10

// runFuzzConn feeds input as the client side of a connection (after reading
// the server greeting) and checks ServeConn ends on its own, without a panic
// and without an out-of-bounds backend access.
func runFuzzConn(t *testing.T, input []byte) {
	be := newMem(fuzzExportSize)
	srv := &Server{Backend: be, Name: "disk0", Log: zap.NewNop()}
	sc, cc := net.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(ctx, sc) }()

	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, cc) // ends when either side closes; the result does not matter
	}()
	if _, err := cc.Write(input); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("client write: %v", err)
	}
	if err := cc.Close(); err != nil {
		t.Fatalf("client close: %v", err)
	}
	<-served
	<-drained
	if ctx.Err() != nil {
		t.Fatal("ServeConn hung until the deadline")
	}
	if n := be.oob.Load(); n != 0 {
		t.Fatalf("%d out-of-bounds backend accesses", n)
	}
}

func FuzzOptions(f *testing.F) {
	flags := clientFlagsBytes(clientFlagFixedNewstyle | clientFlagNoZeroes)
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	f.Add(cat(flags, optionBytes(optGo, infoData("", infoBlockSize)), requestBytes(0, cmdDisc, 1, 0, 0)))
	f.Add(cat(flags, optionBytes(optInfo, infoData("disk0", infoExport, infoBlockSize)), optionBytes(optAbort, nil)))
	f.Add(cat(flags, optionBytes(optList, nil), optionBytes(optStructuredRepl, nil), optionBytes(optGo, infoData("x"))))
	f.Add(cat(clientFlagsBytes(clientFlagFixedNewstyle), optionBytes(optExportName, []byte("disk0"))))
	f.Add(cat(flags, optionBytes(optSetMetaContext, []byte{0, 0, 0, 5, 'd', 'i', 's', 'k', '0', 0, 0, 0, 0})))
	f.Add(cat(flags, optionBytes(optInfo, []byte{0xff, 0xff, 0xff, 0xff, 0, 0})))
	f.Add(cat(flags, optionBytes(optGo, nil)[:16]))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1, 'I', 'H', 'A', 'V', 'E', 'O', 'P', 'T', 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, data []byte) {
		// The pure parsers on their own.
		if len(data) >= optionHeaderLen {
			if o, err := parseOptionHeader(data[:optionHeaderLen]); err == nil && o.Len > maxOptionLen {
				t.Fatalf("option of %d bytes accepted", o.Len)
			}
		}
		if r, err := parseInfoRequest(data); err == nil {
			if len(r.Name) > maxExportName || 4+len(r.Name)+2+2*len(r.Infos) != len(data) {
				t.Fatalf("info request %+v does not account for %d bytes", r, len(data))
			}
		}
		// And a live connection.
		runFuzzConn(t, data)
	})
}

// handshakeBytes is a client's complete handshake entering transmission.
func handshakeBytes() []byte {
	b := clientFlagsBytes(clientFlagFixedNewstyle | clientFlagNoZeroes)
	return append(b, optionBytes(optGo, infoData(""))...)
}

func FuzzRequests(f *testing.F) {
	req := requestBytes
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	f.Add(cat(req(0, cmdWrite, 1, 512, 4), []byte{1, 2, 3, 4}, req(0, cmdRead, 2, 0, 4096), req(0, cmdDisc, 3, 0, 0)))
	f.Add(cat(req(cmdFlagFUA, cmdWrite, 1, fuzzExportSize-2, 2), []byte{9, 9}, req(0, cmdFlush, 2, 0, 0)))
	f.Add(cat(req(0, cmdWriteZeroes, 1, 0, fuzzExportSize), req(0, cmdRead, 2, fuzzExportSize-1, 2)))
	f.Add(cat(req(0, cmdWrite, 1, fuzzExportSize, 8), make([]byte, 8), req(0, 99, 2, 0, 0)))
	f.Add(req(0, cmdWrite, 1, 0, MaxPayload+1))
	f.Add(req(0, cmdRead, 1, ^uint64(0)-3, 8))
	f.Add(cat(req(0, cmdWrite, 1, 0, 100), []byte{1}))
	f.Add([]byte{0x25, 0x60, 0x95, 0x13, 0, 0})
	f.Add(make([]byte, requestHeaderLen))

	f.Fuzz(func(t *testing.T, data []byte) {
		// The pure parser and the decision on every header-sized window.
		for i := 0; i+requestHeaderLen <= len(data); i += requestHeaderLen {
			r, err := parseRequestHeader(data[i : i+requestHeaderLen])
			if err != nil {
				continue
			}
			act, errno := r.check(fuzzExportSize)
			switch act {
			case actServe:
				if r.Type != cmdFlush && (r.Length == 0 || r.Length > MaxPayload || r.Offset+uint64(r.Length) > fuzzExportSize || r.Offset > fuzzExportSize) {
					t.Fatalf("request %+v served", r)
				}
			case actReject:
				if errno == errnoOK {
					t.Fatalf("request %+v rejected with errno 0", r)
				}
			case actAbort:
				if r.Type != cmdWrite || r.Length <= MaxPayload {
					t.Fatalf("request %+v aborts the connection", r)
				}
			}
		}
		runFuzzConn(t, append(handshakeBytes(), data...))
	})
}
