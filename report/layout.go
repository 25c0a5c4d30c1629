package report

import (
	"fmt"
	"sort"
)

// The layout map's geometry, in SVG user units.
const (
	mapWidth     = 960.0
	mapLeft      = 74.0 // room for the band labels
	mapRight     = 16.0
	bandHeight   = 34.0
	parsedY      = 14.0
	writtenY     = parsedY + bandHeight + 14
	tickY        = writtenY + bandHeight + 16
	mapHeight    = tickY + 12
	minTickSpace = 46.0 // between LBA labels
	maxMapRows   = 200  // region table rows shown per lane
)

// axis maps sectors to x on a piecewise-linear scale with one segment per
// parsed region: each gets at least minW units, the rest is shared in
// proportion to size. A superblock of 2 sectors in an image of 16384 is
// then still visible, and every written run is drawn inside the region
// that holds it in the parsed view.
type axis struct {
	segs []segment
	x0   float64
	w    float64
}

type segment struct {
	first, end uint64
	x, w       float64
}

// newAxis builds the axis over [0, total) from the parsed ranges (sorted
// or not; gaps and overlaps allowed) for the width w starting at x0.
func newAxis(parsed []Range, total uint64, x0, w float64) axis {
	rs := append([]Range(nil), parsed...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].First < rs[j].First })
	var bounds [][2]uint64
	cur := uint64(0)
	for _, r := range rs {
		if r.Count == 0 || r.End() <= cur || r.First >= total {
			continue
		}
		if r.First > cur {
			bounds = append(bounds, [2]uint64{cur, r.First})
			cur = r.First
		}
		end := min(r.End(), total)
		bounds = append(bounds, [2]uint64{cur, end})
		cur = end
	}
	if cur < total {
		bounds = append(bounds, [2]uint64{cur, total})
	}
	a := axis{x0: x0, w: w}
	n := float64(len(bounds))
	if n == 0 {
		return a
	}
	minW := min(6, w*0.35/n)
	share := w - n*minW
	x := x0
	for _, b := range bounds {
		sw := minW + share*float64(b[1]-b[0])/float64(total)
		a.segs = append(a.segs, segment{first: b[0], end: b[1], x: x, w: sw})
		x += sw
	}
	return a
}

// x returns the position of sector lba's start (lba = total: the end).
func (a axis) x(lba uint64) float64 {
	if len(a.segs) == 0 {
		return a.x0
	}
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].end > lba })
	if i == len(a.segs) {
		return a.x0 + a.w
	}
	s := a.segs[i]
	if lba < s.first {
		return s.x
	}
	return s.x + s.w*float64(lba-s.first)/float64(s.end-s.first)
}

type rectView struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

type tickView struct {
	X     float64
	Label string
	End   bool // anchored at its end (the last label)
}

type regionRow struct {
	Region, Class, LBAs string
	Sectors, Written    uint64
}

type layoutView struct {
	Index                   int
	ID, RegionsID, Lane     string
	Width, Height           float64
	Left                    float64
	ParsedY, WrittenY, Band float64
	TickY                   float64
	PlotW                   float64
	Parsed, Written         []rectView
	Ticks                   []tickView
	Rows                    []regionRow
	MoreRows                int
	Total                   uint64
	WrittenSectors          uint64
	Runs, Outside           int
	OutsideExample          string
	HasParsed               bool
}

func buildLayout(i int, l Layout) layoutView {
	v := layoutView{
		Index: i, ID: fmt.Sprintf("layout-map-%d", i), RegionsID: fmt.Sprintf("layout-regions-%d", i), Lane: l.Lane,
		Width: mapWidth, Height: mapHeight, Left: mapLeft, ParsedY: parsedY, WrittenY: writtenY, Band: bandHeight, TickY: tickY,
		PlotW: mapWidth - mapLeft - mapRight, HasParsed: len(l.Parsed) > 0,
	}
	for _, rs := range [][]Range{l.Parsed, l.Inferred} {
		for _, r := range rs {
			v.Total = max(v.Total, r.End())
		}
	}
	ax := newAxis(l.Parsed, v.Total, mapLeft, v.PlotW)
	rect := func(r Range, y float64, minW float64) rectView {
		x0, x1 := ax.x(r.First), ax.x(min(r.End(), v.Total))
		return rectView{X: x0, Y: y, W: max(x1-x0, minW), H: bandHeight, Class: kindClass(r.Region),
			Title: fmt.Sprintf("%s: %s (%d sectors)", r.Region, sectorRange(r.First, r.Count), r.Count)}
	}
	for _, r := range l.Parsed {
		if r.Count == 0 {
			continue
		}
		v.Parsed = append(v.Parsed, rect(r, parsedY, 0))
	}
	for _, r := range l.Inferred {
		if r.Count == 0 {
			continue
		}
		v.Runs++
		v.WrittenSectors += r.Count
		v.Written = append(v.Written, rect(r, writtenY, 1.5))
		inside := false
		for _, p := range l.Parsed {
			if p.Region == r.Region && p.First <= r.First && r.End() <= p.End() {
				inside = true
				break
			}
		}
		if !inside && len(l.Parsed) > 0 {
			if v.Outside == 0 {
				v.OutsideExample = fmt.Sprintf("%s %s", r.Region, sectorRange(r.First, r.Count))
			}
			v.Outside++
		}
	}
	// LBA labels at region starts, skipping those too close to the last.
	last := -1e9
	for _, s := range ax.segs {
		if x := ax.x(s.first); x-last >= minTickSpace {
			v.Ticks = append(v.Ticks, tickView{X: x, Label: fmt.Sprint(s.first)})
			last = x
		}
	}
	if v.Total > 0 {
		end := tickView{X: mapLeft + v.PlotW, Label: fmt.Sprint(v.Total), End: true}
		for len(v.Ticks) > 1 && end.X-v.Ticks[len(v.Ticks)-1].X < 2*minTickSpace {
			v.Ticks = v.Ticks[:len(v.Ticks)-1]
		}
		v.Ticks = append(v.Ticks, end)
	}
	for _, p := range l.Parsed {
		if p.Count == 0 {
			continue
		}
		if len(v.Rows) == maxMapRows {
			v.MoreRows++
			continue
		}
		var w uint64
		for _, r := range l.Inferred {
			if r.Region == p.Region {
				lo, hi := max(r.First, p.First), min(r.End(), p.End())
				if hi > lo {
					w += hi - lo
				}
			}
		}
		v.Rows = append(v.Rows, regionRow{Region: p.Region, Class: kindClass(p.Region), LBAs: sectorRange(p.First, p.Count), Sectors: p.Count, Written: w})
	}
	return v
}
