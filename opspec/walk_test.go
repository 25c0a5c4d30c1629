package opspec

import (
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"google.golang.org/protobuf/proto"
)

func TestParseWalk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    *agentv1.Walk // nil: not a walk, or an error
		ok      bool
		wantErr bool
		format  string // FormatWalk of the result
	}{
		{"ls dir", &agentv1.Walk{Path: "dir"}, true, false, "ls dir"},
		{"  ls   dir  ", &agentv1.Walk{Path: "dir"}, true, false, "ls dir"},
		{"ls /dir/", &agentv1.Walk{Path: "dir"}, true, false, "ls dir"},
		{"ls", &agentv1.Walk{}, true, false, "ls /"},
		{"ls /", &agentv1.Walk{}, true, false, "ls /"},
		{"ls .", &agentv1.Walk{}, true, false, "ls /"},
		{"find", &agentv1.Walk{Recursive: true}, true, false, "find /"},
		{"find /", &agentv1.Walk{Recursive: true}, true, false, "find /"},
		{"find tree/d0", &agentv1.Walk{Path: "tree/d0", Recursive: true}, true, false, "find tree/d0"},
		// Syntax only: the session refuses unclean paths.
		{"find a/../b", &agentv1.Walk{Path: "a/../b", Recursive: true}, true, false, "find a/../b"},
		{"ls a b", nil, true, true, ""},
		{"find / -ls", nil, true, true, ""},
		{"lsx d", nil, false, false, ""},
		{"chmod f 0600", nil, false, false, ""},
		{"", nil, false, false, ""},
		{`{"mkdir":{"path":"d"}}`, nil, false, false, ""},
	}
	for _, tt := range tests {
		got, ok, err := ParseWalk(tt.in)
		if ok != tt.ok || (err != nil) != tt.wantErr {
			t.Errorf("ParseWalk(%q) = %v, ok %v, err %v; want ok %v, error %v", tt.in, got, ok, err, tt.ok, tt.wantErr)
			continue
		}
		if !proto.Equal(got, tt.want) {
			t.Errorf("ParseWalk(%q) = %v, want %v", tt.in, got, tt.want)
		}
		if tt.want != nil {
			if f := FormatWalk(got); f != tt.format {
				t.Errorf("FormatWalk(ParseWalk(%q)) = %q, want %q", tt.in, f, tt.format)
			}
			// The canonical form is a fixed point.
			if again, _, err := ParseWalk(tt.format); err != nil || !proto.Equal(again, got) {
				t.Errorf("ParseWalk(%q) = %v, %v; want %v", tt.format, again, err, got)
			}
		}
	}
}

func FuzzParseWalk(f *testing.F) {
	for _, s := range []string{"ls dir", "find /", "ls", "find a b", "chmod f 0600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, ok, err := ParseWalk(s)
		if !ok && (w != nil || err != nil) {
			t.Fatalf("ParseWalk(%q) = %v, %v with ok false", s, w, err)
		}
		if ok && err == nil {
			again, ok2, err2 := ParseWalk(FormatWalk(w))
			if !ok2 || err2 != nil || !proto.Equal(again, w) {
				t.Fatalf("round trip of %q: %v, %v, %v", s, again, ok2, err2)
			}
		}
	})
}
