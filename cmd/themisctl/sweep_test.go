package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/clock"
)

func TestRowOf(t *testing.T) {
	t.Parallel()
	sec, ns := int64(2147483647), int64(5)
	tests := []struct {
		name string
		cell *themisv1.SweepCell
		want clock.Row
	}{
		{name: "on disk", cell: &themisv1.SweepCell{Lane: "ext2", Fs: "ext2", InodeSize: 128, Name: "2^31", Value: 2147483648, Op: "touch", Field: "mtime",
			Guest: &agentv1.Timespec{Sec: sec}, OnDisk: &agentv1.Timespec{Sec: sec, Nsec: ns}, AfterRemount: &agentv1.Timespec{Sec: sec}, Verdict: "clamped", DistinctOnDisk: 2},
			want: clock.Row{Lane: "ext2", FS: "ext2", InodeSize: 128, Name: "2^31", Value: 2147483648, Op: "touch", Field: "mtime",
				Guest: sec, OnDisk: &sec, OnDiskNs: &ns, AfterRemount: sec, Verdict: "clamped", DistinctOnDisk: 2}},
		{name: "no on-disk view", cell: &themisv1.SweepCell{Lane: "vfat", Errno: 22, Verdict: "rejected(22)"},
			want: clock.Row{Lane: "vfat", Errno: 22, Verdict: "rejected(22)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, rowOf(tt.cell)); diff != "" {
				t.Errorf("rowOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s0 := write("s0.jsonl", `{"lane":"ext4","name":"b","value":2,"op":"touch"}`+"\n"+`{"lane":"ext2","name":"a","value":1,"op":"touch"}`+"\n")
	s1 := write("s1.jsonl", `{"lane":"ext2","name":"a","value":1,"op":"touch","verdict":"again"}`+"\n\n")
	bad := write("bad.jsonl", "\n"+`{"lane":"ext2","bogus":1}`)
	rows, err := mergeFiles([]string{s0, s1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Lane+"/"+r.Name+"/"+r.Verdict)
	}
	if diff := cmp.Diff([]string{"ext2/a/", "ext4/b/"}, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		files []string
		want  string
	}{
		{[]string{s0, bad}, "merge: " + bad + `:2: json: unknown field "bogus"`},
		{[]string{filepath.Join(dir, "none.jsonl")}, "merge: open " + filepath.Join(dir, "none.jsonl")},
	} {
		if _, err := mergeFiles(tt.files); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("mergeFiles(%v): %v, want %q", tt.files, err, tt.want)
		}
	}
}
