// Package runreport renders one explore run as a self-contained HTML page:
// the run's configuration and figures, the states it had visited over time
// (inline SVG from the progress it streamed), and every finding with its
// minimized trace, each lane's errno at the last op, the first differing
// path and field, the last op's writes below the filesystem on each lane
// by structure (when the caller measured them), and how to replay and
// export it.
//
// Like package report, the page carries its CSS inline and draws with
// inline SVG: no script, no external resource, no URL but same-page
// anchors. Every string from the run is escaped by html/template.
//
// Pure: Render writes the Run it is given; it does no other I/O, takes no
// time and renders the same Run to the same bytes.
//
// # Ids
//
// svg#states-over-time, table#run-config, table#unique-by-depth (one
// tr.depth[data-depth] per depth), table#findings (one tr.finding[data-id]
// per finding, its footprint in td.footprint, one div.lane-footprint
// [data-lane] per lane).
package runreport
