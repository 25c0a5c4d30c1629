package runreport

const pageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
pre { margin: 0; font: 12px/1.3 ui-monospace, monospace; }
svg text { font: 11px sans-serif; fill: #444; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<h2>Configuration</h2>
<table id="run-config">
{{- range .Config}}
<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>
{{- end}}
{{- range .Figures}}
<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>
{{- end}}
</table>
<h2>States over time</h2>
{{- if .Chart.Empty}}
<p>No progress was reported.</p>
{{- else}}
<svg id="states-over-time" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="states and unique states over time">
<line x1="{{.Left}}" y1="{{.Base}}" x2="{{.W}}" y2="{{.Base}}" stroke="#888"/>
<line x1="{{.Left}}" y1="0" x2="{{.Left}}" y2="{{.Base}}" stroke="#888"/>
<text x="4" y="14">{{.Chart.MaxStates}}</text>
<text x="4" y="{{.Base}}">0</text>
<text x="{{.Left}}" y="{{.H}}">0 s</text>
<text x="{{.W}}" y="{{.H}}" text-anchor="end">{{printf "%.1f" .Chart.MaxSeconds}} s</text>
<polyline class="states" fill="none" stroke="#1f77b4" stroke-width="2" points="{{.Chart.States}}"/>
<polyline class="unique" fill="none" stroke="#d62728" stroke-width="2" points="{{.Chart.Unique}}"/>
<text x="{{.Left}}" y="12" dx="8" fill="#1f77b4">states</text>
<text x="{{.Left}}" y="26" dx="8" fill="#d62728">unique states</text>
</svg>
{{- end}}
<h2>Unique states by depth</h2>
{{- if not .Depths}}
<p>The run did not report its states by depth.</p>
{{- else}}
<table id="unique-by-depth">
<tr><th>depth</th><th>unique states first reached there</th><th></th></tr>
{{- range .Depths}}
<tr class="depth" data-depth="{{.Depth}}"><td>{{.Depth}}</td><td>{{.Count}}</td><td><svg width="{{$.BarW}}" height="12" role="img" aria-label="{{.Count}} states"><rect width="{{printf "%.1f" .Width}}" height="12" fill="#d62728"/></svg></td></tr>
{{- end}}
</table>
{{- end}}
<h2>Findings ({{len .Findings}})</h2>
{{- if not .Findings}}
<p>None: every lane agreed at every state the run visited.</p>
{{- else}}
<table id="findings">
<tr><th>finding</th><th>kind</th><th>what differs</th><th>first difference</th><th>last op, per lane</th><th>last op below the filesystem (sectors written)</th><th>trace</th><th>reproduce</th></tr>
{{- range .Findings}}
<tr class="finding" data-id="{{.ID}}" id="{{.ID}}">
<td>{{.ID}}{{if .DuplicateOf}}<br>duplicate of <a href="#{{.DuplicateOf}}">{{.DuplicateOf}}</a>{{end}}</td>
<td>{{.Kind}}</td>
<td>{{.Detail}}</td>
<td>{{if or .Path .Field}}/{{.Path}}{{end}} {{.Field}}</td>
<td>{{range .Lanes}}{{.Lane}}: errno {{.Errno}}<br>{{end}}</td>
<td class="footprint">{{range .Footprint}}<div class="lane-footprint" data-lane="{{.Lane}}">{{.Lane}}: {{.Sectors}}{{if .Errno}} (errno {{.Errno}}){{end}}{{range .ByRegion}}<br>&nbsp;&nbsp;{{.Region}} {{.Sectors}}{{end}}</div>{{else}}{{.FootprintNote}}{{end}}</td>
<td><pre>{{range $i, $op := .Trace}}{{$i}}  {{$op}}
{{end}}</pre>{{if not .Minimized}}(as found){{end}}</td>
<td><pre>themisctl replay {{.ID}}
themisctl findings export {{.ID}}</pre></td>
</tr>
{{- end}}
</table>
{{- end}}
</body>
</html>
`
