// Package runreport renders one explore run as a self-contained HTML page:
// the run's configuration and figures, the states it had visited over time
// (inline SVG from the progress it streamed), and every finding with its
// minimized trace, each lane's errno at the last op, the first differing
// path and field, and how to replay and export it.
//
// Like package report, the page carries its CSS inline and draws with
// inline SVG: no script, no external resource, no URL but same-page
// anchors. Every string from the run is escaped by html/template.
//
// Pure: Render writes the Run it is given; it does no other I/O, takes no
// time and renders the same Run to the same bytes.
//
// Not on the page yet: unique states by depth (the summary has no
// per-depth counts) and the divergent op's below-FS footprint per lane.
//
// # Ids
//
// svg#states-over-time, table#run-config, table#findings (one
// tr.finding[data-id] per finding).
package runreport
