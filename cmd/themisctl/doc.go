// Command themisctl is the Themis CLI: host checks (doctor), the guest image
// builder, and the daemon's API (sessions, fork, restore, apply, fingerprint,
// ...). With no daemon to talk to, it runs one in-process.
//
// # Layout
//
// Every command has one constructor, newX(g *globals) *cobra.Command, that
// declares its flags and hands the work to a function of its own (runX,
// printX); newRoot adds them all. globals carries the root's flags, the
// logger (built in PersistentPreRunE, never global) and the connection
// flags; g.withConn runs a function with a connection to the daemon (a
// remote one, the local socket's, or one embedded in this process) and
// closes it after. Server streams are read with client.Drain.
//
// The CLI is an adapter: it parses flags, calls the daemon (or, for
// doctor, guest build, bench and diff of image files, a library in
// process), and prints. What is not printing lives in the library
// packages: saved-report ingest and the profile-then-corrupt run in
// report/ingest, sweep rows and their merge in clock, image diffs in
// fsimage. The daemon itself, embedded or in the foreground (themisctl
// daemon), starts through package embedded, the CLI's one door to the
// daemon's side; bench explore measures the engine in process
// (bench.RunInProcess).
//
// # Output
//
// Tables go to stdout through newTable, progress to stderr. With --json,
// every command prints a themis.v1 message in api/jsonout's one form
// (protojson, proto field names, a "schema" key naming the message;
// printMessage, writeProtoJSON; JSON lines with writeProtoJSONLine): an
// RPC's response as the daemon sent it where that is the whole answer,
// else a message that holds it (explore's ExploreResult: request,
// summary, findings; explore merge's MergeExploreResponse, the
// MergeExplore RPC's; in cli.proto, CrashReplay and ExportResult).
// docs/api.md lists which command prints which.
package main
