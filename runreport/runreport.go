package runreport

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
)

// Run is what the page shows of one explore run.
type Run struct {
	Title string
	// Config are the run's settings, in order (name, value).
	Config [][2]string
	// Figures are its results, in order (name, value).
	Figures  [][2]string
	Progress []Point
	// UniqueByDepth counts the unique states by the shallowest depth the
	// run reached each at ([0]: the root); nil when not known.
	UniqueByDepth []int64
	Findings      []Finding
}

// Point is one progress report of the run.
type Point struct {
	Seconds        float64
	States, Unique int64
}

// Finding is one finding on the page.
type Finding struct {
	ID, Kind, Detail, Path, Field string
	Trace                         []string // minimized once Minimized
	Minimized                     bool
	Lanes                         []LaneErrno // each lane's errno at the last op
	DuplicateOf                   string
	// Footprint is the last op's writes below the filesystem on each lane
	// (a profile of the trace: the ops before it as setup, then it alone);
	// FootprintNote says why there is none ("not measured: ...").
	Footprint     []LaneFootprint
	FootprintNote string
}

// LaneFootprint is what one lane wrote to its disk for an op, after a
// sync: sectors in all and by the structure holding them.
type LaneFootprint struct {
	Lane     string
	Errno    int32
	Sectors  int64
	ByRegion []RegionSectors // largest first
}

// RegionSectors is a structure's share of a footprint.
type RegionSectors struct {
	Region  string
	Sectors int64
}

// LaneErrno is one lane's result of a finding's last op.
type LaneErrno struct {
	Lane  string
	Errno int32
}

// chart geometry.
const (
	chartW, chartH = 640.0, 240.0
	left, bottom   = 56.0, 28.0
)

type pointsView struct {
	States, Unique string // SVG polyline points
	MaxStates      int64
	MaxSeconds     float64
	Empty          bool
}

func chart(ps []Point) pointsView {
	v := pointsView{Empty: len(ps) == 0}
	for _, p := range ps {
		v.MaxStates = max(v.MaxStates, p.States, p.Unique)
		v.MaxSeconds = math.Max(v.MaxSeconds, p.Seconds)
	}
	if v.Empty {
		return v
	}
	sx := (chartW - left - 8) / math.Max(v.MaxSeconds, 1e-9)
	sy := (chartH - bottom - 8) / float64(max(v.MaxStates, 1))
	var s, u strings.Builder
	for _, p := range ps {
		x := left + p.Seconds*sx
		fmt.Fprintf(&s, "%.1f,%.1f ", x, chartH-bottom-float64(p.States)*sy)
		fmt.Fprintf(&u, "%.1f,%.1f ", x, chartH-bottom-float64(p.Unique)*sy)
	}
	v.States, v.Unique = strings.TrimSpace(s.String()), strings.TrimSpace(u.String())
	return v
}

// depthBar is one depth's row of the unique-by-depth table.
type depthBar struct {
	Depth int
	Count int64
	Width float64 // of barW
}

// barW is the width of the longest bar.
const barW = 320.0

func depthBars(by []int64) []depthBar {
	var most int64
	for _, n := range by {
		most = max(most, n)
	}
	bars := make([]depthBar, len(by))
	for d, n := range by {
		bars[d] = depthBar{Depth: d, Count: n, Width: barW * float64(n) / float64(max(most, 1))}
	}
	return bars
}

var page = template.Must(template.New("run").Parse(pageTemplate))

// Render writes r as one HTML page to w.
func Render(w io.Writer, r *Run) error {
	data := struct {
		*Run
		Chart                    pointsView
		Depths                   []depthBar
		W, H, Left, Bottom, Base float64
		BarW                     float64
	}{Run: r, Chart: chart(r.Progress), Depths: depthBars(r.UniqueByDepth), W: chartW, H: chartH, Left: left, Bottom: bottom, Base: chartH - bottom, BarW: barW}
	if err := page.Execute(w, data); err != nil {
		return fmt.Errorf("runreport: %w", err)
	}
	return nil
}
