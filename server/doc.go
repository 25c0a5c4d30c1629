// Package server is the gRPC face of the Themis daemon.
//
// It has two halves:
//
//   - Server: thin adapters implementing themisv1.ThemisServer over a Domain
//     (in production a *session.Manager). Every handler validates its request
//     at the edge (the offending field is named: "session_id: required"),
//     converts proto to domain types, calls the domain once, converts back,
//     and maps the error to a gRPC status in one place, toStatus. No handler
//     holds state of its own; the Domain owns sessions and serializes work on
//     them.
//   - Daemon: the wiring themisd and themisctl's embedded mode share: TOML
//     config (strict: an unknown key is an error naming it), the listener (a
//     unix socket created with mode 0600, or TCP that is refused unless TLS
//     and either mTLS or a bearer token are configured) and its bounds
//     (limits.go, peerlimit.go: connections per peer counted before the
//     handshake, a handshake deadline, idle connections, streams without
//     the token), auth and metrics interceptors, grpc health and reflection, the Prometheus endpoint, and
//     a graceful Shutdown that stops every guest and removes the socket.
//
// Concurrency: handlers run on gRPC's goroutines and may run concurrently;
// the Domain must be safe for concurrent use. Daemon methods are safe for
// concurrent use; Shutdown is idempotent.
//
// Dependencies point downward: server imports session and client (for the
// default socket path) and never vmm backends directly, except to hand the
// session manager its configuration.
package server
