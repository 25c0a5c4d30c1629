package clock

import (
	"encoding/json"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/themisfs/themis/internal/kreport"
)

func TestReadRows(t *testing.T) {
	t.Parallel()
	sec, ns := int64(2147483647), int64(0)
	clamped := Row{Lane: "ext2", FS: "ext2", InodeSize: 128, Name: "2^31", Value: 2147483648, Op: "touch", Field: "mtime",
		Guest: sec, OnDisk: &sec, OnDiskNs: &ns, AfterRemount: sec, Verdict: "clamped(2147483647)"}
	line := func(r Row) string {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name    string
		in      string
		want    []Row
		wantErr string
	}{
		{name: "empty"},
		{name: "rows and blank lines", in: line(clamped) + "\n\n  \n" + line(Row{Lane: "vfat", Errno: 22}) + "\n", want: []Row{clamped, {Lane: "vfat", Errno: 22}}},
		{name: "null on disk", in: `{"lane":"vfat","on_disk":null,"on_disk_ns":null}`, want: []Row{{Lane: "vfat"}}},
		{name: "unknown field", in: line(clamped) + "\n\n" + `{"lane":"ext2","bogus":1}`, wantErr: `s0.jsonl:3: json: unknown field "bogus"`},
		{name: "not JSON", in: "lane,fs\n", wantErr: "s0.jsonl:1: "},
		{name: "line too long", in: `{"lane":"` + strings.Repeat("x", maxRowLine) + `"}`, wantErr: "s0.jsonl: bufio.Scanner: token too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ReadRows(strings.NewReader(tt.in), "s0.jsonl")
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("ReadRows: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadRows: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadRows (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMergeRows compares MergeRows with a naive model on random shards:
// the first row of each cell, sorted by lane, value, op (and, among rows
// equal in those, in the order read).
func TestMergeRows(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 50; iter++ {
		var shards [][]Row
		var all []Row
		for s := rng.Intn(4); s >= 0; s-- {
			var shard []Row
			for n := rng.Intn(6); n > 0; n-- {
				v := rng.Int63n(3)
				r := Row{Lane: []string{"ext2", "ext4", "vfat"}[rng.Intn(3)], Name: []string{"a", "b", "c"}[v], Value: v,
					Op: []string{"create", "touch"}[rng.Intn(2)], Verdict: strings.Repeat("x", len(all))}
				shard = append(shard, r)
				all = append(all, r)
			}
			shards = append(shards, shard)
		}
		var want []Row
		for i, r := range all {
			first := true
			for _, p := range all[:i] {
				if p.Lane == r.Lane && p.Name == r.Name && p.Op == r.Op {
					first = false
				}
			}
			if first {
				want = append(want, r)
			}
		}
		sort.SliceStable(want, func(i, j int) bool {
			a, b := want[i], want[j]
			return a.Lane < b.Lane || a.Lane == b.Lane && (a.Value < b.Value || a.Value == b.Value && a.Op < b.Op)
		})
		if diff := cmp.Diff(want, MergeRows(shards...)); diff != "" {
			t.Fatalf("shards %v: MergeRows (-naive +got):\n%s", shards, diff)
		}
	}
}

func TestRowCSV(t *testing.T) {
	t.Parallel()
	sec, ns := int64(7), int64(9)
	tests := []struct {
		name string
		row  Row
		want string
	}{
		{name: "on disk", row: Row{Lane: "ext2", FS: "ext2", InodeSize: 128, Name: "n", Value: 8, Op: "touch", Field: "mtime", Guest: 7, OnDisk: &sec, OnDiskNs: &ns, AfterRemount: 7, Verdict: "v", Expected: "e"},
			want: "ext2,ext2,128,n,,8,0,touch,mtime,7,0,7,9,7,0,0,v,e"},
		{name: "no on-disk view", row: Row{Lane: "vfat", Errno: 22}, want: "vfat,,0,,,0,0,,,0,0,,,0,0,22,,"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.row.CSV()
			if len(got) != len(CSVHeader) {
				t.Errorf("%d fields, header has %d", len(got), len(CSVHeader))
			}
			if s := strings.Join(got, ","); s != tt.want {
				t.Errorf("CSV = %s, want %s", s, tt.want)
			}
		})
	}
}

// TestReadRowsKernel: a kernel-crash row of a sharded sweep's JSON lines
// reads back with its report, so that a merge keeps it.
func TestReadRowsKernel(t *testing.T) {
	t.Parallel()
	crashed := Row{Lane: "ext2", FS: "ext2", Name: "2^31", Value: 2147483648, Op: "mkdir", Field: "mtime", Verdict: "kernel-crash",
		Kernel: &kreport.Report{Kind: kreport.Panic, Title: "Kernel panic - not syncing: sysrq triggered crash", Trace: []string{"sysrq_handle_crash+0x16/0x20"}}}
	b, err := json.Marshal(crashed)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ReadRows(strings.NewReader(string(b)+"\n"), "s0.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Row{crashed}, MergeRows(rows)); diff != "" {
		t.Errorf("read back and merged (-want +got):\n%s", diff)
	}
}
