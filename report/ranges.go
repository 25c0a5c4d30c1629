package report

import "sort"

// Union merges ranges into sorted, disjoint runs; where ranges of
// different regions overlap, the one starting first keeps the sectors.
// Empty ranges are dropped; in is not modified.
func Union(in []Range) []Range {
	rs := append([]Range(nil), in...)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].First < rs[j].First })
	var out []Range
	for _, r := range rs {
		if r.Count == 0 {
			continue
		}
		if n := len(out); n > 0 {
			last := &out[n-1]
			if r.End() <= last.End() {
				continue // covered
			}
			if r.First <= last.End() && r.Region == last.Region {
				last.Count = r.End() - last.First
				continue
			}
			if r.First < last.End() {
				r.Count, r.First = r.End()-last.End(), last.End()
			}
		}
		out = append(out, r)
	}
	return out
}

// AddWrittenLayouts gives every lane that has profile rows but no layout
// the written view alone: a Layout whose Inferred is the Union of the
// sectors its rows wrote. Lanes are added in the order of their first row.
func (r *Report) AddWrittenLayouts() {
	has := map[string]bool{}
	for _, l := range r.Layouts {
		has[l.Lane] = true
	}
	var lanes []string
	written := map[string][]Range{}
	for _, row := range r.Profile {
		if has[row.Lane] {
			continue
		}
		if _, ok := written[row.Lane]; !ok {
			lanes = append(lanes, row.Lane)
		}
		written[row.Lane] = append(written[row.Lane], row.Written...)
	}
	for _, lane := range lanes {
		r.Layouts = append(r.Layouts, Layout{Lane: lane, Inferred: Union(written[lane])})
	}
}
