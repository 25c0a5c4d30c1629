package session_test

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// hostile is a fake machine whose agent lies: its fingerprints report one
// regular file "f" of size size with content, and its reads return data
// (content when data is nil).
type hostile struct {
	sessiontest.Machine
	size    int64
	content []byte
	data    []byte // what every ReadFile returns; nil: content from the offset
	noEOF   bool   // never say eof
}

// Call implements vmm.Machine: fingerprints and reads lie, the rest is the
// double's.
func (h *hostile) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	switch op := req.Op.(type) {
	case *agentv1.Request_Fingerprint:
		sum := blake3.Sum256(h.content)
		return &agentv1.Response{Result: &agentv1.Response_Fingerprint{Fingerprint: &agentv1.FingerprintResult{
			Root: []byte{1}, Entries: 1, Leaves: []*agentv1.Entry{{Path: "f", Kind: agentv1.Kind_KIND_REGULAR, Size: h.size, ContentHash: sum[:]}}}}}, nil
	case *agentv1.Request_ReadFile:
		data := h.data
		if data == nil {
			off := min(op.ReadFile.GetOffset(), int64(len(h.content)))
			data = h.content[off:min(int64(len(h.content)), off+op.ReadFile.GetLength())]
		}
		eof := !h.noEOF && op.ReadFile.GetOffset()+int64(len(data)) >= int64(len(h.content))
		return &agentv1.Response{Result: &agentv1.Response_ReadFile{ReadFile: &agentv1.ReadFileResult{Data: data, Eof: eof}}}, nil
	}
	return h.Machine.Call(ctx, req)
}

// TestHostileLengths: lengths the agent reports (a file's size, the bytes
// a read returns) that are impossible or beyond what was asked fail the
// call with an error, and the session with it; they never panic the
// daemon. Sizes too large to keep are fingerprinted, not kept.
func TestHostileLengths(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, 3<<20)
	cases := []struct {
		name    string
		h       *hostile
		fork    bool   // Fork succeeds
		wantErr string // else: its error contains this
	}{
		{"honest", &hostile{size: 5, content: []byte("hello")}, true, ""},
		{"size -1", &hostile{size: -1, content: []byte("hello")}, false, "size -1"},
		{"size min int64", &hostile{size: math.MinInt64, content: []byte("hello")}, false, "size -9223372036854775808"},
		{"size 1<<62 (not kept)", &hostile{size: 1 << 62, content: []byte("hello")}, true, ""},
		{"more data than its size", &hostile{size: 5, content: []byte("hello"), data: big}, false, "more than"},
		{"repeats past its end", &hostile{size: 5, content: []byte("hello"), data: []byte("hello"), noEOF: true}, false, "more than"},
		{"no end", &hostile{size: 5, content: []byte("hello"), data: []byte("h"), noEOF: true}, false, "no end"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine { return tc.h })
			ctx := context.Background()
			in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Fork(ctx, in.ID, "", "")
			if tc.fork {
				if err != nil {
					t.Fatalf("fork: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("fork: error %v, want one containing %q", err, tc.wantErr)
			}
			got, err := m.Get(ctx, in.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != session.StateFailed {
				t.Fatalf("session %s after a lying agent, want %s", got.State, session.StateFailed)
			}
		})
	}
}

// TestHostileReadFile: a read that returns more bytes than were asked for
// is an error, not a reply passed on to the client.
func TestHostileReadFile(t *testing.T) {
	for _, length := range []int64{0, 1, 1 << 20} {
		h := &hostile{size: 5, content: []byte("hello"), data: bytes.Repeat([]byte{'x'}, 2<<20)}
		m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine { return h })
		ctx := context.Background()
		in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
		if err != nil {
			t.Fatal(err)
		}
		data, _, _, err := m.ReadFile(ctx, in.ID, "ext2", "f", 0, length)
		if err == nil || !strings.Contains(err.Error(), "more than") {
			t.Fatalf("read of %d bytes: %d bytes back, error %v; want one saying more than asked", length, len(data), err)
		}
	}
}
