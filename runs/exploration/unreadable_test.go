package exploration

import (
	"context"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestUnreadableCheck: an entry the walk could not read is a finding
// naming the lane, the path and the errno; an lseek answer lseek(2) rules
// out is a seek-answer finding (a lane's errno comes first); a tree read
// whole is none.
func TestUnreadableCheck(t *testing.T) {
	t.Parallel()
	readable := []*agentv1.Entry{{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY}, {Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY}}
	bad := append(readable[:2:2], &agentv1.Entry{Path: "d-00/f-00", Kind: agentv1.Kind_KIND_REGULAR, ReadErrno: 74})
	seek := append(readable[:2:2], &agentv1.Entry{Path: "f-01", Kind: agentv1.Kind_KIND_REGULAR, Size: 1<<63 - 1,
		SeekError: "lseek(9223372036854771712, SEEK_HOLE) = -9223372036854775808: want a hole past the data"})
	tests := []struct {
		name             string
		a, b             []*agentv1.Entry
		kind, field      string
		wantPath, detail string
	}{
		{"all readable", readable, readable, "", "", "", ""},
		{"second lane refuses a file", readable, bad, KindUnreadable, "read_errno", "d-00/f-00", "lane b: the filesystem refuses to read d-00/f-00: errno 74 (bad message)"},
		{"root unreadable", []*agentv1.Entry{{Path: "", ReadErrno: 5}}, readable, KindUnreadable, "read_errno", "", "lane a: the filesystem refuses to read /: errno 5 (input/output error)"},
		{"a wrong lseek answer", seek, readable, KindSeekAnswer, "seek", "f-01", "lane a: the filesystem answers lseek on f-01 with an offset lseek(2) rules out: lseek(9223372036854771712, SEEK_HOLE) = -9223372036854775808"},
		{"an errno before a seek answer", append(seek[:3:3], bad[2]), readable, KindUnreadable, "read_errno", "d-00/f-00", "lane a: the filesystem refuses to read d-00/f-00"},
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
			if f == nil || f.Kind != tt.kind || f.Path != tt.wantPath || f.Field != tt.field || !strings.Contains(f.Detail, tt.detail) {
				t.Fatalf("finding = %+v, want %s at %q: %q", f, tt.kind, tt.wantPath, tt.detail)
			}
		})
	}
}

// TestSizeCheck: a regular file past its lane's family's largest file is
// a finding; at the limit, on a lane without one, or a directory, none.
func TestSizeCheck(t *testing.T) {
	t.Parallel()
	file := func(size int64) []*agentv1.Entry {
		return []*agentv1.Entry{{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY}, {Path: "f-00", Kind: agentv1.Kind_KIND_REGULAR, Size: size}}
	}
	tests := []struct {
		name   string
		udf    []*agentv1.Entry
		ext4   []*agentv1.Entry
		detail string
	}{
		{"at the limit", file(1 << 42), file(1 << 50), ""},
		{"past it", file(1<<42 + 1), file(0), "lane udf: f-00 has 4398046511105 bytes, past its filesystem's largest file, 4398046511104 bytes"},
		{"a directory", []*agentv1.Entry{{Path: "d", Kind: agentv1.Kind_KIND_DIRECTORY, Size: 1 << 43}}, file(0), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &system{lanes: []string{"udf", "ext4"}, maxFile: map[string]int64{"udf": 1 << 42},
				leaves: map[string][]*agentv1.Entry{"udf": tt.udf, "ext4": tt.ext4}}
			f, err := x.sizeCheck(context.Background(), nil, nil)
			switch {
			case err != nil:
				t.Fatal(err)
			case tt.detail == "" && f != nil:
				t.Fatalf("finding %+v", f)
			case tt.detail != "" && (f == nil || f.Kind != KindSizeLimit || f.Detail != tt.detail):
				t.Fatalf("finding %+v, want %q", f, tt.detail)
			}
		})
	}
}
