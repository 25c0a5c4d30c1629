// Package ingest fills a report.Report: from a daemon, by running the
// profile and then the corruption sweep on its Profile and Corrupt streams
// (Collect), or from saved results without a guest (Load).
//
// # Saved results
//
// Load reads a file, or every *.json and *.jsonl file of a directory in
// name order, as a stream of JSON values, and tells them apart by their
// keys: the page's data as "themisctl --json report" prints it
// (themis.v1.ReportPage, api/jsonout; Page and FromPage convert it),
// report.Report's own JSON (the hand-made samples of report/testdata),
// ProfileRow and CorruptResult as "themisctl --json profile" and "--json
// corrupt" print them (protojson, proto names), and the Profile and
// Corrupt stream messages as grpcurl prints them. A lane with profile rows but no layout
// gets the written view alone (report.Report.AddWrittenLayouts). One file
// is read up to MaxInput bytes.
//
// # Dependencies
//
// Unlike report, which is pure and must not import the API or grpc, ingest
// is the adapter between them: it imports the generated API, protojson,
// api/jsonout and client (for client.Drain). It must not import session or server. The
// functions are safe for concurrent use; Collect's Observer hooks run on
// the calling goroutine.
package ingest
