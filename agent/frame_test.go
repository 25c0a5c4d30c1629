package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/agent/internal/fuzzseed"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func frame(t testing.TB, m proto.Message) []byte {
	t.Helper()
	var b bytes.Buffer
	mustFrame(t, &b, m)
	return b.Bytes()
}

func sampleRequest() *agentv1.Request {
	return &agentv1.Request{Id: 7, Op: &agentv1.Request_Write{Write: &agentv1.Write{
		Lane: "ext2", Path: "d-00/f-00", Offset: 4096, Data: []byte("hello")}}}
}

// oneWrite counts Write calls.
type oneWrite struct {
	bytes.Buffer
	calls int
}

func (w *oneWrite) Write(p []byte) (int, error) {
	w.calls++
	return w.Buffer.Write(p)
}

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range []*agentv1.Request{{}, sampleRequest()} {
		var w oneWrite
		if err := WriteFrame(&w, m); err != nil {
			t.Fatal(err)
		}
		if w.calls != 1 {
			t.Errorf("WriteFrame made %d Write calls, want 1", w.calls)
		}
		if n := binary.BigEndian.Uint32(w.Bytes()); int(n) != w.Len()-4 || int(n) != proto.Size(m) {
			t.Errorf("length prefix %d, body %d", n, w.Len()-4)
		}
		got := new(agentv1.Request)
		if err := ReadFrame(&w, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, m) {
			t.Errorf("got %v, want %v", got, m)
		}
		if err := ReadFrame(&w, got); err != io.EOF {
			t.Errorf("at end: %v, want io.EOF", err)
		}
	}
}

func TestReadFrameErrors(t *testing.T) {
	t.Parallel()
	valid := frame(t, sampleRequest())
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"short header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"short body", valid[:len(valid)-1], io.ErrUnexpectedEOF},
		{"header only", valid[:4], io.ErrUnexpectedEOF},
		{"oversized", []byte{0x01, 0x00, 0x00, 0x01, 1, 2, 3}, ErrFrameTooLarge},
		{"max uint32", []byte{0xff, 0xff, 0xff, 0xff}, ErrFrameTooLarge},
		{"big but truncated", []byte{0x00, 0xff, 0xff, 0xff, 1}, io.ErrUnexpectedEOF},
		{"garbage body", []byte{0, 0, 0, 3, 0xff, 0xff, 0xff}, ErrDecode},
		{"empty body", []byte{0, 0, 0, 0}, nil},
	}
	for _, tt := range tests {
		err := ReadFrame(bytes.NewReader(tt.in), new(agentv1.Request))
		if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
		if tt.want == io.EOF && err != io.EOF {
			t.Errorf("%s: clean EOF must be io.EOF itself, got %v", tt.name, err)
		}
	}
}

func TestWriteFrameTooLarge(t *testing.T) {
	t.Parallel()
	m := &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Data: make([]byte, MaxFrame)}}}
	var w bytes.Buffer
	if err := WriteFrame(&w, m); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if w.Len() != 0 {
		t.Errorf("wrote %d bytes of a refused frame", w.Len())
	}
}

func FuzzReadFrame(f *testing.F) {
	for _, s := range fuzzseed.Seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for i := 0; i < 4; i++ {
			m := new(agentv1.Request)
			err := ReadFrame(r, m)
			if err != nil {
				if len(in) >= 4 && binary.BigEndian.Uint32(in) > MaxFrame && i == 0 && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("oversized length not refused: %v", err)
				}
				return
			}
			// What decodes re-encodes and decodes to the same message.
			var b bytes.Buffer
			if err := WriteFrame(&b, m); err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			m2 := new(agentv1.Request)
			if err := ReadFrame(&b, m2); err != nil || !proto.Equal(m, m2) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}

var update = flag.Bool("update", false, "rewrite testdata/fuzz seed corpora")

// TestSeedCorpus keeps testdata/fuzz/FuzzReadFrame equal to fuzzseed.Frames; run
// with -update to rewrite it.
func TestSeedCorpus(t *testing.T) {
	fuzzseed.CheckCorpus(t, filepath.Join("testdata", "fuzz", "FuzzReadFrame"), *update)
}
