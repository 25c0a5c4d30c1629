package report

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// The amplification chart's geometry, in SVG user units.
const (
	chartWidth  = 760.0
	chartHeight = 420.0
	chartLeft   = 70.0
	chartRight  = 170.0 // the legend
	chartTop    = 16.0
	chartBottom = 56.0
)

// seriesColors colour the lanes of the chart, in order.
var seriesColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

type pointView struct {
	X, Y  float64
	Title string
}

type seriesView struct {
	Lane, Color string
	Points      []pointView
	Line        string // polyline points
	LegendY     float64
}

type axisTick struct {
	Pos   float64 // x for the x axis, y for the y axis
	Label string
}

type chartView struct {
	Width, Height             float64
	Left, Top, Right, Bottom  float64 // plot box edges
	XTicks, YTicks            []axisTick
	Series                    []seriesView
	Ideal                     string // polyline: ceil(bytes/512) sectors
	XLabelX, XLabelY, YLabelY float64
	LegendX, IdealLegendY     float64
	Points, Skipped           int
}

// buildChart plots sectors written against bytes requested for every write
// row (Bytes > 0) that succeeded and wrote something, log2 on x, log10 on y,
// one series per lane, with the ideal ceil(bytes/512) as a dashed line.
func buildChart(rows []ProfileRow) chartView {
	c := chartView{Width: chartWidth, Height: chartHeight, Left: chartLeft, Top: chartTop,
		Right: chartWidth - chartRight, Bottom: chartHeight - chartBottom}
	var lanes []string
	byLane := map[string][]ProfileRow{}
	var maxBytes int64
	maxSectors := 1.0
	for _, r := range rows {
		if r.Bytes <= 0 {
			continue
		}
		if r.Errno != 0 || r.SectorsWritten <= 0 {
			c.Skipped++
			continue
		}
		if _, ok := byLane[r.Lane]; !ok {
			lanes = append(lanes, r.Lane)
		}
		byLane[r.Lane] = append(byLane[r.Lane], r)
		maxBytes = max(maxBytes, r.Bytes)
		maxSectors = max(maxSectors, float64(r.SectorsWritten), math.Ceil(float64(r.Bytes)/512))
	}
	// x: log2 bytes from 0 (1 B) to an even power of two; y: log10 sectors
	// from 0 (1 sector) to the next power of ten with some headroom.
	xMax := math.Max(2, math.Ceil(math.Log2(float64(max(maxBytes, 1)))))
	if int(xMax)%2 == 1 {
		xMax++
	}
	yMax := math.Max(1, math.Ceil(math.Log10(maxSectors*1.15)))
	px := func(b float64) float64 { return c.Left + (c.Right-c.Left)*math.Log2(b)/xMax }
	py := func(s float64) float64 { return c.Bottom - (c.Bottom-c.Top)*math.Log10(s)/yMax }
	for e := 0.0; e <= xMax; e += 2 {
		c.XTicks = append(c.XTicks, axisTick{Pos: px(math.Exp2(e)), Label: humanBytes(math.Exp2(e))})
	}
	for e := 0.0; e <= yMax; e++ {
		c.YTicks = append(c.YTicks, axisTick{Pos: py(math.Pow(10, e)), Label: fmt.Sprint(int64(math.Pow(10, e)))})
	}
	var ideal []string
	for e := 0.0; e <= xMax*4; e++ {
		b := math.Exp2(e / 4)
		ideal = append(ideal, fmt.Sprintf("%.2f,%.2f", px(b), py(math.Ceil(b/512))))
	}
	c.Ideal = strings.Join(ideal, " ")
	c.XLabelX, c.XLabelY, c.YLabelY = (c.Left+c.Right)/2, c.Bottom+40, (c.Top+c.Bottom)/2
	c.LegendX = c.Right + 18
	for i, lane := range lanes {
		rs := byLane[lane]
		sort.SliceStable(rs, func(a, b int) bool { return rs[a].Bytes < rs[b].Bytes })
		s := seriesView{Lane: lane, Color: seriesColors[i%len(seriesColors)], LegendY: c.Top + 14 + 20*float64(i)}
		var line []string
		for _, r := range rs {
			p := pointView{X: px(float64(r.Bytes)), Y: py(float64(r.SectorsWritten)),
				Title: fmt.Sprintf("%s, %s: %s requested, %d sectors written (%s), amplification %.1f×",
					lane, r.Op, humanBytes(float64(r.Bytes)), r.SectorsWritten, humanBytes(float64(r.SectorsWritten)*512), r.Amplification)}
			s.Points = append(s.Points, p)
			line = append(line, fmt.Sprintf("%.2f,%.2f", p.X, p.Y))
			c.Points++
		}
		s.Line = strings.Join(line, " ")
		c.Series = append(c.Series, s)
	}
	c.IdealLegendY = c.Top + 14 + 20*float64(len(lanes))
	return c
}
