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
	Findings []Finding
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

var page = template.Must(template.New("run").Parse(pageTemplate))

// Render writes r as one HTML page to w.
func Render(w io.Writer, r *Run) error {
	data := struct {
		*Run
		Chart                    pointsView
		W, H, Left, Bottom, Base float64
	}{Run: r, Chart: chart(r.Progress), W: chartW, H: chartH, Left: left, Bottom: bottom, Base: chartH - bottom}
	if err := page.Execute(w, data); err != nil {
		return fmt.Errorf("runreport: %w", err)
	}
	return nil
}
