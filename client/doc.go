// Package client connects to a Themis daemon: themisctl and remote CI jobs
// use it.
//
// An address is either a unix socket ("unix:///run/themis/themisd.sock") or
// TCP ("host:port", or "tcp://host:port"). On a unix socket the transport is
// the socket itself (its file mode is the access control); TCP always uses
// TLS, verified against Options.CAFile (or the system roots), optionally with
// a client certificate for mTLS. A bearer token (Options.Token) is sent as
// "authorization: Bearer <token>" on every call and is never sent over an
// unprotected transport.
//
// Drain reads any of the API's server streams (Explore, ClockSweep,
// Profile, Corrupt) to its end, one message at a time: the one Recv loop
// its callers share.
//
// The package depends only on the generated API and grpc; it must not import
// server or session, so remote clients stay small.
package client
