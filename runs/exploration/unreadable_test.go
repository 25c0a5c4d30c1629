package exploration

import (
	"context"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestUnreadableCheck: an entry the walk could not read is a finding
// naming the lane, the path and the errno; a tree read whole is none.
func TestUnreadableCheck(t *testing.T) {
	t.Parallel()
	readable := []*agentv1.Entry{{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY}, {Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY}}
	bad := append(readable[:2:2], &agentv1.Entry{Path: "d-00/f-00", Kind: agentv1.Kind_KIND_REGULAR, ReadErrno: 74})
	tests := []struct {
		name             string
		a, b             []*agentv1.Entry
		wantPath, detail string
	}{
		{"all readable", readable, readable, "", ""},
		{"second lane refuses a file", readable, bad, "d-00/f-00", "lane b: the filesystem refuses to read d-00/f-00: errno 74 (bad message)"},
		{"root unreadable", []*agentv1.Entry{{Path: "", ReadErrno: 5}}, readable, "", "lane a: the filesystem refuses to read /: errno 5 (input/output error)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &system{lanes: []string{"a", "b"}, leaves: map[string][]*agentv1.Entry{"a": tt.a, "b": tt.b}}
			f, err := x.unreadableCheck(context.Background(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.detail == "" {
				if f != nil {
					t.Fatalf("finding %+v on a readable tree", f)
				}
				return
			}
			if f == nil || f.Kind != KindUnreadable || f.Path != tt.wantPath || f.Field != "read_errno" || !strings.Contains(f.Detail, tt.detail) {
				t.Fatalf("finding = %+v, want %s at %q: %q", f, KindUnreadable, tt.wantPath, tt.detail)
			}
		})
	}
}
