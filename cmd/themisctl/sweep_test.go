package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api/jsonout"
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
	// The lines as sweep clock --json prints them.
	lines := func(cells ...*themisv1.SweepCell) string {
		var b strings.Builder
		for _, c := range cells {
			line, err := jsonout.Encode(c, false)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(line)
			b.WriteString("\n")
		}
		return b.String()
	}
	crashed := &themisv1.SweepCell{Lane: "ext4", Name: "b", Value: 2, Op: "touch", Verdict: "kernel-crash",
		Kernel: &themisv1.KernelReport{Kind: "panic", Title: "Kernel panic - not syncing"}, ClampedTo: 7}
	s0 := write("s0.jsonl", lines(crashed, &themisv1.SweepCell{Lane: "ext2", Name: "a", Value: 1, Op: "touch"}))
	s1 := write("s1.jsonl", lines(&themisv1.SweepCell{Lane: "ext2", Name: "a", Value: 1, Op: "touch", Verdict: "again"})+"\n")
	empty := write("empty.jsonl", "")
	bad := write("bad.jsonl", "\n"+`{"schema":"themis.v1.SweepCell","lane":"ext2","bogus":1}`)
	other := write("other.jsonl", lines(&themisv1.SweepCell{Lane: "ext2"})+`{"schema":"themis.v1.SweepSummary","cells":"1"}`)
	cells, err := mergeFiles([]string{s0, s1, empty})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cells {
		got = append(got, c.GetLane()+"/"+c.GetName()+"/"+c.GetVerdict())
	}
	if diff := cmp.Diff([]string{"ext2/a/", "ext4/b/kernel-crash"}, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if !proto.Equal(cells[1], crashed) {
		t.Errorf("merged %v, want the cell as read: %v", cells[1], crashed)
	}
	for _, tt := range []struct {
		files []string
		want  string
	}{
		{[]string{s0, bad}, "merge: " + bad + `: line 2: `},
		{[]string{other}, "merge: " + other + ": document 2 is a themis.v1.SweepSummary, want a themis.v1.SweepCell"},
		{[]string{filepath.Join(dir, "none.jsonl")}, "merge: open " + filepath.Join(dir, "none.jsonl")},
	} {
		if _, err := mergeFiles(tt.files); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("mergeFiles(%v): %v, want %q", tt.files, err, tt.want)
		}
	}
}
