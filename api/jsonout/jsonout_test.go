package jsonout_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

var sessions = &themisv1.ListSessionsResponse{Sessions: []*themisv1.Session{{
	Id: "s-1", Backend: "qemu", MemoryMib: 128, Lanes: []*themisv1.Lane{{Name: "ext2"}, {Name: "ext4"}},
	CreateTime: &timestamppb.Timestamp{Seconds: 1796133000},
}}}

// TestEncode pins the one form: schema first, proto names, 64-bit
// integers as strings, indented by two spaces or on one line.
func TestEncode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		m         proto.Message
		multiline bool
		want      string
	}{
		{name: "empty", m: &themisv1.ListSessionsResponse{}, multiline: true, want: "{\n  \"schema\": \"themis.v1.ListSessionsResponse\"\n}"},
		{name: "empty line", m: &themisv1.ListSessionsResponse{}, want: `{"schema":"themis.v1.ListSessionsResponse"}`},
		{name: "line", m: sessions,
			want: `{"schema":"themis.v1.ListSessionsResponse","sessions":[{"id":"s-1","lanes":[{"name":"ext2"},{"name":"ext4"}],"backend":"qemu","memory_mib":128,"create_time":"2026-12-01T13:50:00Z"}]}`},
		{name: "multiline", m: &themisv1.Lane{Name: "ext2"}, multiline: true, want: "{\n  \"schema\": \"themis.v1.Lane\",\n  \"name\": \"ext2\"\n}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := jsonout.Encode(tt.m, tt.multiline)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Encode:\n%s\nwant\n%s", got, tt.want)
			}
			back, err := jsonout.Decode(got)
			if err != nil {
				t.Fatalf("Decode(%s): %v", got, err)
			}
			if !proto.Equal(back, tt.m) {
				t.Errorf("Decode gave %v, want %v", back, tt.m)
			}
		})
	}
}

// TestEncodeRefuses: a message outside themis.v1 has no schema here.
func TestEncodeRefuses(t *testing.T) {
	t.Parallel()
	if _, err := jsonout.Encode(durationpb.New(0), false); err == nil || !strings.Contains(err.Error(), "google.protobuf.Duration") {
		t.Errorf("Encode(Duration): %v, want an error naming the message", err)
	}
}

// TestDecodeErrors: each bad document is refused with what is wrong.
func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, want string
	}{
		{"not json", `{`, "decode json"},
		{"array", `[]`, "decode json"},
		{"no schema", `{"sessions":[]}`, `no "schema" key`},
		{"schema not a string", `{"schema":1}`, "want a string"},
		{"other package", `{"schema":"google.protobuf.Duration"}`, "want a message of themis.v1"},
		{"invalid name", `{"schema":"themis.v1.a b"}`, "want a message of themis.v1"},
		{"unknown message", `{"schema":"themis.v1.NoSuchThing"}`, "does not know"},
		{"unknown field", `{"schema":"themis.v1.Lane","nam":"x"}`, "nam"},
		{"wrong type", `{"schema":"themis.v1.Lane","name":3}`, "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jsonout.Decode([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode(%s): %v, want an error containing %q", tt.doc, err, tt.want)
			}
		})
	}
}

// TestDecodeInto refuses a document of another message.
func TestDecodeInto(t *testing.T) {
	t.Parallel()
	b, err := jsonout.Encode(&themisv1.Lane{Name: "vfat"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var l themisv1.Lane
	if err := jsonout.DecodeInto(b, &l); err != nil || l.GetName() != "vfat" {
		t.Errorf("DecodeInto(Lane) = %v, %v", &l, err)
	}
	if err := jsonout.DecodeInto(b, &themisv1.Session{}); err == nil || !strings.Contains(err.Error(), "want themis.v1.Session") {
		t.Errorf("DecodeInto(Session) of a Lane: %v, want a mismatch error", err)
	}
}

// TestDecodeLines reads a JSON lines stream and names a bad line.
func TestDecodeLines(t *testing.T) {
	t.Parallel()
	a, _ := jsonout.Encode(&themisv1.Lane{Name: "a"}, false)
	b, _ := jsonout.Encode(&themisv1.Lane{Name: "b"}, false)
	ms, err := jsonout.DecodeLines([]byte(string(a) + "\n\n" + string(b) + "\n"))
	if err != nil || len(ms) != 2 {
		t.Fatalf("DecodeLines: %d, %v", len(ms), err)
	}
	if _, err := jsonout.DecodeLines([]byte(string(a) + "\n{\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("DecodeLines with a bad line 2: %v", err)
	}
	if _, err := jsonout.DecodeLines([]byte("\n")); err == nil {
		t.Error("DecodeLines of nothing: no error")
	}
}

// FuzzDecode: no input panics, and what decodes encodes back to a
// document that decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"schema":"themis.v1.Lane","name":"x"}`, `{"schema":"themis.v1.ListSessionsResponse","sessions":[{"id":"s"}]}`, `{}`, `{"schema":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := jsonout.Decode(b)
		if err != nil {
			return
		}
		again, err := jsonout.Encode(m, false)
		if err != nil {
			t.Fatalf("Encode of a decoded %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
		}
		back, err := jsonout.Decode(again)
		if err != nil || !proto.Equal(back, m) {
			t.Fatalf("round trip of %s: %v", again, err)
		}
	})
}
