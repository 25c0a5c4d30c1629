package clock

import (
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/themisfs/themis/internal/kreport"
)

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

// TestMergeRowsKernel: a merge keeps a kernel-crash row's report.
func TestMergeRowsKernel(t *testing.T) {
	t.Parallel()
	crashed := Row{Lane: "ext2", FS: "ext2", Name: "2^31", Value: 2147483648, Op: "mkdir", Field: "mtime", Verdict: "kernel-crash",
		Kernel: &kreport.Report{Kind: kreport.Panic, Title: "Kernel panic - not syncing: sysrq triggered crash", Trace: []string{"sysrq_handle_crash+0x16/0x20"}}}
	if diff := cmp.Diff([]Row{crashed}, MergeRows([]Row{crashed}, []Row{{Lane: "ext2", Name: "2^31", Op: "mkdir"}})); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
}
