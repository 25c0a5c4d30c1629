// Package live keeps the latest progress of each session a run is using
// and hands it to subscribers: the dashboard's server-sent events
// (/sessions/{id}/events). The daemon's run adapters (server) publish
// what their streams already carry — explore and check progress, crash
// results — through a Feed, one per run; the dashboard reads a session's
// run and last update (Lookup) and subscribes to what follows.
//
// Everything is bounded: the sessions kept (MaxSessions: the running ones
// and the most recently ended), the open subscriptions (MaxSubscribers),
// an update's text (MaxText) and what a slow subscriber queues (one
// update: the newest replaces one not yet read). A subscription ends when
// its session's run ends (its last update says Done), when the Hub
// closes, or when the subscriber closes it.
//
// A Hub is safe for concurrent use; a nil *Hub and a nil *Feed do
// nothing. It imports nothing of the project's.
package live
