package report

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUnion compares Union with a naive model: a sector -> region map
// filled in order of First (the first range keeps a sector).
func TestUnion(t *testing.T) {
	t.Parallel()
	for _, in := range [][]Range{
		nil,
		{{First: 4, Count: 2, Region: "gd"}, {First: 4, Count: 2, Region: "gd"}},
		{{First: 10, Count: 5, Region: "data"}, {First: 15, Count: 1, Region: "data"}, {First: 2, Count: 2, Region: "sb"}},
		{{First: 10, Count: 5, Region: "data"}, {First: 12, Count: 8, Region: "itable"}, {First: 20, Count: 1, Region: "itable"}},
		{{First: 0, Count: 100, Region: "a"}, {First: 5, Count: 3, Region: "b"}, {First: 99, Count: 0, Region: "c"}},
	} {
		naive := map[uint64]string{}
		sorted := append([]Range(nil), in...)
		for i := range sorted {
			for j := i + 1; j < len(sorted); j++ {
				if sorted[j].First < sorted[i].First {
					sorted[i], sorted[j] = sorted[j], sorted[i]
				}
			}
		}
		for _, r := range sorted {
			for l := r.First; l < r.End(); l++ {
				if _, ok := naive[l]; !ok {
					naive[l] = r.Region
				}
			}
		}
		got := map[uint64]string{}
		var prevEnd uint64
		for i, r := range Union(in) {
			if i > 0 && r.First < prevEnd {
				t.Errorf("%v: runs overlap at %d", in, r.First)
			}
			prevEnd = r.End()
			for l := r.First; l < r.End(); l++ {
				got[l] = r.Region
			}
		}
		if diff := cmp.Diff(naive, got); len(naive)+len(got) > 0 && diff != "" {
			t.Errorf("Union(%v) (-naive +got):\n%s", in, diff)
		}
	}
}

func TestAddWrittenLayouts(t *testing.T) {
	t.Parallel()
	row := func(lane string, w ...Range) ProfileRow { return ProfileRow{Lane: lane, Written: w} }
	tests := []struct {
		name string
		in   Report
		want []Layout
	}{
		{name: "empty", in: Report{}},
		{
			name: "rows only",
			in: Report{Profile: []ProfileRow{
				row("ext4", Range{First: 8, Count: 2, Region: "data"}),
				row("ext2", Range{First: 4, Count: 2, Region: "gd"}),
				row("ext4", Range{First: 9, Count: 4, Region: "data"}),
			}},
			want: []Layout{
				{Lane: "ext4", Inferred: []Range{{First: 8, Count: 5, Region: "data"}}},
				{Lane: "ext2", Inferred: []Range{{First: 4, Count: 2, Region: "gd"}}},
			},
		},
		{
			name: "a lane with a layout keeps it",
			in: Report{
				Layouts: []Layout{{Lane: "ext2", Parsed: []Range{{First: 0, Count: 2, Region: "boot"}}}},
				Profile: []ProfileRow{row("ext2", Range{First: 4, Count: 2, Region: "gd"}), row("vfat")},
			},
			want: []Layout{
				{Lane: "ext2", Parsed: []Range{{First: 0, Count: 2, Region: "boot"}}},
				{Lane: "vfat"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.in
			r.AddWrittenLayouts()
			if diff := cmp.Diff(tt.want, r.Layouts); diff != "" {
				t.Errorf("AddWrittenLayouts (-want +got):\n%s", diff)
			}
		})
	}
}
