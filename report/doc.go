// Package report renders the below-the-filesystem results as one
// self-contained HTML page: the layout map of each lane's image (which LBA
// ranges hold the superblock, group descriptors, bitmaps, inode tables and
// data, parsed from the image and as the profile's writes show them), the
// write-amplification curve (bytes requested against sectors written, log
// scales) with the profile's rows, and the blast-radius table of a
// corruption sweep (class per target and lane) with its details.
//
// # Self-contained
//
// The page carries its CSS inline and draws every figure as inline SVG. It
// has no script, no external stylesheet, font or image, and no URL other
// than same-page anchors: it opens the same offline, from a file, as an
// attachment or in a CI artefact. Every string from the data (lane names,
// ops, paths, kernel log lines) is escaped by html/template.
//
// # Purity
//
// report is a pure package: Render takes a Report and writes HTML to the
// writer it is given; it does no other I/O, takes no time (the caller puts
// a date in Report.Note if it wants one) and is deterministic: the same
// Report renders to the same bytes. It must not import the session, vmm or
// gRPC packages (internal/arch enforces the last two); the types here are
// plain data, filled by report/ingest from the daemon's Profile and Corrupt
// streams or from their saved JSON. Union and Report.AddWrittenLayouts
// build the written view of a layout from profile rows. Render is safe for
// concurrent use.
//
// # Figure ids
//
// Tests and readers find the figures by id: svg#layout-map-<i> (class
// layout-map, data-lane the lane) per lane, svg#amplification-curve, and
// table#blast-radius; the tables behind them are table#layout-regions-<i>,
// table#profile-rows and table#blast-radius-details.
package report
