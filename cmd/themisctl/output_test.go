package main

import (
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestProtoJSON pins the one form --json prints API messages in, whatever
// spaces this binary's protojson adds: proto names, 64-bit integers as
// strings, indented by two spaces or on one line.
func TestProtoJSON(t *testing.T) {
	t.Parallel()
	msg := &themisv1.ListSessionsResponse{Sessions: []*themisv1.Session{{
		Id: "s-1", Backend: "qemu", MemoryMib: 128, Lanes: []*themisv1.Lane{{Name: "ext2"}, {Name: "ext4"}},
		CreateTime: &timestamppb.Timestamp{Seconds: 1796133000},
	}}}
	tests := []struct {
		name      string
		m         *themisv1.ListSessionsResponse
		multiline bool
		want      string
	}{
		{name: "empty", m: &themisv1.ListSessionsResponse{}, multiline: true, want: "{}"},
		{name: "line", m: msg,
			want: `{"sessions":[{"id":"s-1","lanes":[{"name":"ext2"},{"name":"ext4"}],"backend":"qemu","memory_mib":128,"create_time":"2026-12-01T13:50:00Z"}]}`},
		{name: "multiline", m: msg, multiline: true, want: `{
  "sessions": [
    {
      "id": "s-1",
      "lanes": [
        {
          "name": "ext2"
        },
        {
          "name": "ext4"
        }
      ],
      "backend": "qemu",
      "memory_mib": 128,
      "create_time": "2026-12-01T13:50:00Z"
    }
  ]
}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := protoJSON(tt.m, tt.multiline)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("protoJSON:\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
