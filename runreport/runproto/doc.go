// Package runproto makes an explore run's page (a runreport.Run) of the
// API's messages: the request, the summary, the progress reports and the
// findings, as `themisctl explore --report` holds them after the stream
// and `report --run S` and the dashboard's run page get them of a run
// kept in the ledger (GetExploreRun, ListFindings). Apart from runreport,
// which is pure and reaches no grpc (internal/arch).
package runproto
