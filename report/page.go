package report

import (
	"fmt"
	"html/template"
	"strings"
)

type legendItem struct{ Kind, Class string }

type profileView struct {
	Lane, Op, Bytes, Where, Amplification string
	SectorsWritten, SectorsRead           int
	Errno                                 int32
}

type cellView struct {
	Class, Name, Where, Title string
	Empty                     bool
}

type blastRowView struct {
	Target string
	Cells  []cellView
}

type blastDetailView struct {
	Lane, Target, Bit, Where, Class, ClassClass, Mount, Fsck, FsckTitle, Affected, KernelLog string
	FsckClean                                                                                bool
}

type classCount struct {
	Class, Meaning, CSS string
	Count               int
}

type page struct {
	Title, Note  string
	Legend       []legendItem
	Layouts      []layoutView
	Chart        chartView
	ProfileRows  []profileView
	BlastLanes   []string
	BlastRows    []blastRowView
	BlastDetails []blastDetailView
	Classes      []classCount
}

func buildPage(r *Report) page {
	p := page{Title: r.Title, Note: r.Note}
	if p.Title == "" {
		p.Title = DefaultTitle
	}
	seen := map[string]bool{}
	for _, l := range r.Layouts {
		for _, rs := range [][]Range{l.Parsed, l.Inferred} {
			for _, x := range rs {
				seen[x.Region] = true
			}
		}
	}
	for _, k := range kindOrder {
		if seen[k] {
			p.Legend = append(p.Legend, legendItem{Kind: k, Class: kindClass(k)})
			delete(seen, k)
		}
	}
	if len(seen) > 0 {
		p.Legend = append(p.Legend, legendItem{Kind: "other", Class: "k-other"})
	}
	for i, l := range r.Layouts {
		p.Layouts = append(p.Layouts, buildLayout(i, l))
	}
	p.Chart = buildChart(r.Profile)
	for _, row := range r.Profile {
		var where []string
		sums := map[string]uint64{}
		for _, w := range row.Written {
			if _, ok := sums[w.Region]; !ok {
				where = append(where, w.Region)
			}
			sums[w.Region] += w.Count
		}
		for i, k := range where {
			where[i] = fmt.Sprintf("%s %d", k, sums[k])
		}
		p.ProfileRows = append(p.ProfileRows, profileView{Lane: row.Lane, Op: row.Op, Bytes: fmt.Sprint(row.Bytes),
			SectorsWritten: row.SectorsWritten, SectorsRead: row.SectorsRead, Amplification: fmt.Sprintf("%.1f", row.Amplification),
			Where: strings.Join(where, ", "), Errno: row.Errno})
	}
	buildBlast(&p, r.Blast)
	return p
}

func buildBlast(p *page, results []BlastResult) {
	var targets []string
	lanesSeen, targetsSeen := map[string]bool{}, map[string]bool{}
	cells := map[[2]string]BlastResult{}
	counts := map[string]int{}
	for _, b := range results {
		if !lanesSeen[b.Lane] {
			lanesSeen[b.Lane] = true
			p.BlastLanes = append(p.BlastLanes, b.Lane)
		}
		if !targetsSeen[b.Target] {
			targetsSeen[b.Target] = true
			targets = append(targets, b.Target)
		}
		cells[[2]string{b.Target, b.Lane}] = b
		counts[b.Class]++
	}
	for _, t := range targets {
		row := blastRowView{Target: t}
		for _, lane := range p.BlastLanes {
			b, ok := cells[[2]string{t, lane}]
			if !ok {
				row.Cells = append(row.Cells, cellView{Empty: true})
				continue
			}
			where := fmt.Sprintf("LBA %d+%d", b.LBA, b.Offset)
			title := fmt.Sprintf("%s, bit %d of byte %d", strings.TrimSpace(b.Region+" "+b.Field), b.Bit, b.Offset)
			if len(b.Affected) > 0 {
				title += "; affected: " + strings.Join(b.Affected, " ")
			}
			if len(b.KernelLog) > 0 {
				title += "; kernel: " + b.KernelLog[0]
			}
			if b.Class == "n/a" {
				where, title = "", b.Field // nothing was flipped
			}
			row.Cells = append(row.Cells, cellView{Class: classClass(b.Class), Name: b.Class, Where: where, Title: title})
		}
		p.BlastRows = append(p.BlastRows, row)
	}
	for _, b := range results {
		d := blastDetailView{Lane: b.Lane, Target: b.Target, Bit: fmt.Sprintf("%d:%d.%d", b.LBA, b.Offset, b.Bit),
			Where: strings.TrimSpace(b.Region + " " + b.Field), Class: b.Class, ClassClass: classClass(b.Class),
			Mount: "mounted", Fsck: "clean", FsckClean: b.FsckClean, FsckTitle: b.FsckSummary,
			Affected: strings.Join(b.Affected, " "), KernelLog: strings.Join(b.KernelLog, "\n")}
		if b.Class == "n/a" {
			d.Bit, d.Mount, d.Fsck = "-", "-", "-"
			p.BlastDetails = append(p.BlastDetails, d)
			continue
		}
		if !b.Mounted {
			d.Mount = "failed"
			if b.MountError != "" {
				d.Mount += ": " + b.MountError
			}
		}
		switch {
		case b.FsckTool == "" && strings.HasPrefix(b.FsckSummary, "no host checker"):
			d.Fsck = "no checker" // results before fsck_tool carry neither
		case !b.FsckClean:
			d.Fsck = "errors"
		}
		if b.ReadErrno != 0 {
			d.Affected += fmt.Sprintf(" (read errno %d)", b.ReadErrno)
		}
		p.BlastDetails = append(p.BlastDetails, d)
	}
	for _, c := range Classes {
		if n := counts[c.Name]; n > 0 {
			p.Classes = append(p.Classes, classCount{Class: c.Name, Meaning: c.Meaning, CSS: classClass(c.Name), Count: n})
		}
	}
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"f":   func(x float64) string { return fmt.Sprintf("%.2f", x) },
	"add": func(a, b float64) float64 { return a + b },
	"sub": func(a, b float64) float64 { return a - b },
}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px auto; max-width: 1000px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
p.note, p.empty, figcaption { color: #555; }
nav a { margin-right: 14px; }
figure { margin: 12px 0; }
svg { max-width: 100%; height: auto; font: 11px system-ui, sans-serif; }
svg text { fill: #333; }
svg .band-bg { fill: #fafafa; stroke: #ccc; }
svg rect.region { stroke: #fff; stroke-width: 0.5; }
svg rect.run { stroke: none; }
svg .grid { stroke: #e4e4e4; }
svg .frame { fill: none; stroke: #999; }
svg .ideal { fill: none; stroke: #777; stroke-dasharray: 5 4; }
svg .series { fill: none; stroke-width: 2; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td small { display: block; color: #555; }
td.kmsg { font-family: ui-monospace, monospace; font-size: 12px; white-space: pre-wrap; max-width: 340px; }
ul.legend { list-style: none; padding: 0; margin: 6px 0; }
ul.legend li { display: inline-block; margin-right: 14px; }
.sw { display: inline-block; width: 12px; height: 12px; vertical-align: -1px; margin-right: 4px; border: 1px solid #aaa; }
.k-boot { fill: #bdbdbd; background: #bdbdbd; }
.k-superblock { fill: #d62728; background: #d62728; }
.k-padding { fill: #e6e6e6; background: #e6e6e6; }
.k-gd { fill: #ff7f0e; background: #ff7f0e; }
.k-rgdt { fill: #ffcc99; background: #ffcc99; }
.k-bbitmap { fill: #2ca02c; background: #2ca02c; }
.k-ibitmap { fill: #98df8a; background: #98df8a; }
.k-itable { fill: #1f77b4; background: #1f77b4; }
.k-journal { fill: #9467bd; background: #9467bd; }
.k-data { fill: #e8c872; background: #e8c872; }
.k-unused { fill: #f4f4f4; background: #f4f4f4; }
.k-outside, .k-other { fill: #7f7f7f; background: #7f7f7f; }
.c-fatal { background: #d73027; color: #fff; }
td.c-fatal small { color: #fde0dd; }
#blast-radius td { white-space: nowrap; }
.c-namespace-loss { background: #fc8d59; }
.c-detected { background: #b8e186; }
.c-silent-metadata { background: #c2a5cf; }
.c-silent-content { background: #e7d4e8; }
.c-none { background: #f0f0f0; }
.c-na { background: #fff; color: #7f7f7f; }
.c-other { background: #fff; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{- if .Note}}
<p class="note">{{.Note}}</p>
{{- end}}
<nav><a href="#layout">Layout map</a><a href="#amplification">Write amplification</a><a href="#blast">Blast radius</a></nav>

<section id="layout">
<h2>Layout map</h2>
{{- if .Layouts}}
<p>Each lane's image from LBA 0 to its end, on a scale where every region gets a visible width (the rest in proportion to size). Top band: the regions parsed from the image; bottom band: the sectors the profile's ops wrote, placed in the region that holds them.</p>
<ul class="legend">{{range .Legend}}<li><span class="sw {{.Class}}"></span>{{.Kind}}</li>{{end}}</ul>
{{- range .Layouts}}{{$l := .}}
<h3>{{.Lane}}</h3>
<figure>
<svg id="{{.ID}}" class="layout-map" data-lane="{{.Lane}}" xmlns="http://www.w3.org/2000/svg" width="{{f .Width}}" height="{{f .Height}}" viewBox="0 0 {{f .Width}} {{f .Height}}" role="img" aria-label="layout map of {{.Lane}}">
<text x="4" y="{{f .ParsedY}}" dy="22">parsed</text>
<text x="4" y="{{f .WrittenY}}" dy="22">written</text>
<rect class="band-bg" x="{{f .Left}}" y="{{f .ParsedY}}" width="{{f .PlotW}}" height="{{f .Band}}"/>
<rect class="band-bg" x="{{f .Left}}" y="{{f .WrittenY}}" width="{{f .PlotW}}" height="{{f .Band}}"/>
<g class="parsed">
{{- range .Parsed}}
<rect class="region {{.Class}}" x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}"><title>{{.Title}}</title></rect>
{{- end}}
</g>
<g class="written">
{{- range .Written}}
<rect class="run {{.Class}}" x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}"><title>{{.Title}}</title></rect>
{{- end}}
</g>
<g class="ticks">
{{- range .Ticks}}
<text x="{{f .X}}" y="{{f $l.TickY}}"{{if .End}} text-anchor="end"{{end}}>{{.Label}}</text>
{{- end}}
</g>
</svg>
<figcaption>{{.Lane}}: {{.Total}} sectors; {{.WrittenSectors}} distinct sectors written in {{.Runs}} runs.
{{- if not .HasParsed}} The parsed view is not in the input.
{{- else if .Outside}} {{.Outside}} written runs lie outside a parsed region of their kind (first: {{.OutsideExample}}).
{{- else if .Runs}} Every written run lies inside a parsed region of the same kind: the two views agree.
{{- end}}</figcaption>
</figure>
{{- if .Rows}}
<table id="{{.RegionsID}}" class="layout-regions">
<thead><tr><th>region</th><th>sectors</th><th>LBAs</th><th>written</th></tr></thead>
<tbody>
{{- range .Rows}}
<tr><td><span class="sw {{.Class}}"></span>{{.Region}}</td><td class="num">{{.Sectors}}</td><td>{{.LBAs}}</td><td class="num">{{.Written}}</td></tr>
{{- end}}
{{- if .MoreRows}}
<tr><td colspan="4">… {{.MoreRows}} more regions</td></tr>
{{- end}}
</tbody>
</table>
{{- end}}
{{- end}}
{{- else}}
<p class="empty">No layout in the input.</p>
{{- end}}
</section>

<section id="amplification">
<h2>Write amplification</h2>
{{- if .Chart.Points}}
<p>Sectors the device received for a write of each size and the sync after it (from a checkpoint where the file exists, empty), against the bytes requested; log scales. Dashed: the ideal, the data sectors alone.</p>
<figure>
{{- with .Chart}}
<svg id="amplification-curve" xmlns="http://www.w3.org/2000/svg" width="{{f .Width}}" height="{{f .Height}}" viewBox="0 0 {{f .Width}} {{f .Height}}" role="img" aria-label="write amplification">
<g class="x-axis">
{{- range .XTicks}}
<line class="grid" x1="{{f .Pos}}" y1="{{f $.Chart.Top}}" x2="{{f .Pos}}" y2="{{f $.Chart.Bottom}}"/>
<text x="{{f .Pos}}" y="{{f $.Chart.Bottom}}" dy="16" text-anchor="middle">{{.Label}}</text>
{{- end}}
</g>
<g class="y-axis">
{{- range .YTicks}}
<line class="grid" x1="{{f $.Chart.Left}}" y1="{{f .Pos}}" x2="{{f $.Chart.Right}}" y2="{{f .Pos}}"/>
<text x="{{f $.Chart.Left}}" y="{{f .Pos}}" dx="-6" dy="4" text-anchor="end">{{.Label}}</text>
{{- end}}
</g>
<rect class="frame" x="{{f .Left}}" y="{{f .Top}}" width="{{f (sub .Right .Left)}}" height="{{f (sub .Bottom .Top)}}"/>
<text x="{{f .XLabelX}}" y="{{f .XLabelY}}" text-anchor="middle">bytes requested</text>
<text x="16" y="{{f .YLabelY}}" text-anchor="middle" transform="rotate(-90 16 {{f .YLabelY}})">sectors written</text>
<polyline class="ideal" points="{{.Ideal}}"/>
{{- range .Series}}{{$color := .Color}}
<g class="series-group" data-lane="{{.Lane}}">
<polyline class="series" stroke="{{.Color}}" points="{{.Line}}"/>
{{- range .Points}}
<circle class="point" cx="{{f .X}}" cy="{{f .Y}}" r="4" fill="{{$color}}"><title>{{.Title}}</title></circle>
{{- end}}
</g>
{{- end}}
<g class="legend">
{{- range .Series}}
<line x1="{{f $.Chart.LegendX}}" y1="{{f .LegendY}}" x2="{{f (add $.Chart.LegendX 22)}}" y2="{{f .LegendY}}" stroke="{{.Color}}" stroke-width="2"/>
<text x="{{f (add $.Chart.LegendX 28)}}" y="{{f .LegendY}}" dy="4">{{.Lane}}</text>
{{- end}}
<line class="ideal" x1="{{f .LegendX}}" y1="{{f .IdealLegendY}}" x2="{{f (add .LegendX 22)}}" y2="{{f .IdealLegendY}}"/>
<text x="{{f (add .LegendX 28)}}" y="{{f .IdealLegendY}}" dy="4">ideal ⌈bytes/512⌉</text>
</g>
</svg>
{{- end}}
<figcaption>{{.Chart.Points}} writes{{if .Chart.Skipped}}; {{.Chart.Skipped}} failed or wrote nothing and are not plotted{{end}}.</figcaption>
</figure>
{{- else}}
<p class="empty">No write rows in the input.</p>
{{- end}}
{{- if .ProfileRows}}
<h3>Every profiled op</h3>
<table id="profile-rows">
<thead><tr><th>lane</th><th>op</th><th>bytes</th><th>sectors written</th><th>written where (sectors)</th><th>cold sectors read</th><th>amplification</th><th>errno</th></tr></thead>
<tbody>
{{- range .ProfileRows}}
<tr><td>{{.Lane}}</td><td>{{.Op}}</td><td class="num">{{.Bytes}}</td><td class="num">{{.SectorsWritten}}</td><td>{{.Where}}</td><td class="num">{{.SectorsRead}}</td><td class="num">{{.Amplification}}</td><td class="num">{{if .Errno}}{{.Errno}}{{end}}</td></tr>
{{- end}}
</tbody>
</table>
{{- end}}
</section>

<section id="blast">
<h2>Blast radius</h2>
{{- if .BlastRows}}
<p>One bit flipped per target on a fork branch of the checkpoint, then drop caches and remount; the class says what the flip did (most severe that applies).</p>
<table id="blast-radius">
<thead><tr><th>target</th>{{range .BlastLanes}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .BlastRows}}
<tr><td>{{.Target}}</td>{{range .Cells}}{{if .Empty}}<td>—</td>{{else}}<td class="{{.Class}}" title="{{.Title}}">{{.Name}}<small>{{.Where}}</small></td>{{end}}{{end}}</tr>
{{- end}}
</tbody>
</table>
<ul class="legend">{{range .Classes}}<li><span class="sw {{.CSS}}"></span>{{.Class}} ({{.Count}}): {{.Meaning}}</li>{{end}}</ul>
<h3>Details</h3>
<table id="blast-radius-details">
<thead><tr><th>lane</th><th>target</th><th>LBA:byte.bit</th><th>region / field</th><th>class</th><th>mount</th><th>fsck</th><th>affected</th><th>kernel log</th></tr></thead>
<tbody>
{{- range .BlastDetails}}
<tr><td>{{.Lane}}</td><td>{{.Target}}</td><td>{{.Bit}}</td><td>{{.Where}}</td><td class="{{.ClassClass}}">{{.Class}}</td><td>{{.Mount}}</td><td title="{{.FsckTitle}}">{{.Fsck}}</td><td>{{.Affected}}</td><td class="kmsg">{{.KernelLog}}</td></tr>
{{- end}}
</tbody>
</table>
{{- else}}
<p class="empty">No corruption results in the input.</p>
{{- end}}
</section>
</body>
</html>
`
