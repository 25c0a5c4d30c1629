// Package errkind holds the kinds of error a request can fail with, which
// the gRPC layer maps to codes in one place (server.toStatus), and
// FieldError, bad input in a named request field. Every layer that
// validates (the server's handlers, session, the runs, launch) raises these,
// and none needs to import another to do so.
package errkind
