package opspec

import (
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"google.golang.org/protobuf/proto"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	// Canonical short forms: Format(Parse(s)) == s.
	for _, s := range []string{
		"create d-00/f-00 0644",
		"create f 0600 excl trunc",
		"write f 0 4096 0x55",
		"write f 65535 2 0xff append sync",
		"write f 4398046510080 1024 0x55 sync creat",
		"truncate f 65537",
		"unlink f",
		"mkdir d-00 0755",
		"rmdir d-00",
		"chmod f 0777",
		"chown f 1000",
		"chgrp f 0",
		"setxattr f user.a v create",
		"removexattr f user.a",
		"rename f g",
		"rename f g noreplace",
		"rename f d exchange",
		"rename d e whiteout",
		"link f g",
		"symlink ../x s",
		"utimens f now 2147483648.000000001",
		"utimens f omit -1",
		"fsync f",
		"fsync",
		"fdatasync d-00/f-00",
		"sync",
		"drop-caches 3",
		"set-clock 2147483648",
		"umount",
		"mount",
		"same-mount write f 100 10 0xaa",
		"same-mount truncate d-00/f-00 512",
	} {
		op, err := Parse(s)
		if err != nil {
			t.Errorf("Parse(%q): %v", s, err)
			continue
		}
		if got := Format(op); got != s {
			t.Errorf("Format(Parse(%q)) = %q", s, got)
		}
		// protojson form parses to the same op.
		again, err := Parse(Format(op))
		if err != nil || !proto.Equal(again, op) {
			t.Errorf("reparse of %q: %v", s, err)
		}
		if _, err := Request(op); err != nil {
			t.Errorf("Request(%q): %v", s, err)
		}
	}
}

func TestParseValues(t *testing.T) {
	t.Parallel()
	op, err := Parse("write d/f 4095 4097 0x00 direct")
	if err != nil {
		t.Fatal(err)
	}
	w := op.GetWrite()
	if w.GetPath() != "d/f" || w.GetOffset() != 4095 || w.GetSize() != 4097 || w.GetFill() != 0 || w.GetFlags() != oRdwr|oDirect {
		t.Errorf("write parsed as %v", w)
	}
	op, err = Parse(`{"mkdir":{"path":"d","mode":493}}`)
	if err != nil || op.GetMkdir().GetMode() != 0o755 {
		t.Errorf("protojson mkdir: %v %v", op, err)
	}
	if got := Format(op); got != "mkdir d 0755" {
		t.Errorf("Format = %q", got)
	}
	// fdatasync of the lane (syncfs) has no short form.
	op = &themisv1.Op{Op: &themisv1.Op_Fsync{Fsync: &agentv1.Fsync{Datasync: true}}}
	got := Format(op)
	again, err := Parse(got)
	if !strings.HasPrefix(got, "{") || err != nil || !proto.Equal(again, op) {
		t.Errorf("Format(fdatasync of the lane) = %q, reparsed %v, %v", got, again, err)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", "empty"},
		{"frobnicate x", "unknown operation"},
		{"mkdir", "want 1 to 2 arguments"},
		{"chmod f 999", "octal"},
		{"write f x 1", "offset"},
		{"write f 0 1 0x100", "fill"},
		{"create f 0644 append", "flag"},
		{"utimens f now soon", "time"},
		{"rename a b sideways", "want noreplace, exchange or whiteout"},
		{"drop-caches 4", "level"},
		{"fdatasync", "want 1 argument"},
		{"{}", "no operation"},
		{"same-mount", "empty"},
		{"same-mount same-mount mkdir d", "unknown operation"},
		{`{"mkdir":`, "protojson"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error mentioning %q", tt.in, err, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"write f 0 4096 0x55 append", "create a 0644 excl", `{"rename":{"path":"a","newPath":"b"}}`, "utimens f 1.5 now", "same-mount rename a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		op, err := Parse(s)
		if err != nil {
			return
		}
		out := Format(op)
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Format(Parse(%q)) = %q does not parse: %v", s, out, err)
		}
		if !proto.Equal(op, again) {
			t.Fatalf("round trip of %q changed the op: %v vs %v", s, op, again)
		}
	})
}

func TestFromRequest(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"mkdir d 0755", "write f 1 2 0x55 append", "rename a b", "fsync f", "fdatasync f", "sync", "set-clock 5", "same-mount truncate f 9"} {
		op, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		req, err := Request(op)
		if err != nil {
			t.Fatal(err)
		}
		back, err := FromRequest(req)
		if err != nil || !proto.Equal(back, op) {
			t.Errorf("FromRequest(Request(%q)) = %v, %v", s, back, err)
		}
	}
	if _, err := FromRequest(&agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}); err == nil {
		t.Error("FromRequest of a ping: no error")
	}
}

func TestParseRequest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		kind string // the request's op, "" for an error
	}{
		{"mkdir d 0755", "mkdir"},
		{"write f 0 4096 0x55", "write"},
		{"sync", "sync"},
		{"frobnicate x", ""},
	} {
		got, err := ParseRequest(tt.in)
		if tt.kind == "" {
			if err == nil {
				t.Errorf("ParseRequest(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ParseRequest(%q): %v", tt.in, err)
		}
		m := got.ProtoReflect()
		if k := string(m.WhichOneof(m.Descriptor().Oneofs().ByName("op")).Name()); k != tt.kind {
			t.Errorf("ParseRequest(%q) carries %s, want %s", tt.in, k, tt.kind)
		}
	}
}

// TestSameMountProtojson: an op the short form cannot say keeps its
// same-mount mark through Format's protojson.
func TestSameMountProtojson(t *testing.T) {
	t.Parallel()
	op := &themisv1.Op{KeepMount: true, Op: &themisv1.Op_Mkdir{Mkdir: &agentv1.Mkdir{Path: "a b", Mode: 0o755}}}
	s := Format(op)
	back, err := Parse(s)
	if err != nil || !proto.Equal(back, op) || strings.HasPrefix(s, SameMount) {
		t.Errorf("Format = %q, read back %v, %v", s, back, err)
	}
	req, err := Request(op)
	if err != nil || !req.GetKeepMount() {
		t.Errorf("Request = %v, %v: want keep_mount", req, err)
	}
}
