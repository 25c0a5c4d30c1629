package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Transport limits of the daemon's gRPC server (docs/api.md).
const (
	// MaxConnections is the most client connections served at once; more
	// wait in the listen backlog until one closes. One peer holds at most
	// limits.max_conns_per_peer of them (DefaultConnsPerPeer), and one that
	// never finishes its handshake for at most HandshakeTimeout, so no
	// single peer can take them all.
	MaxConnections = 64
	// DefaultConnsPerPeer is limits.max_conns_per_peer when unset: the most
	// TCP connections from one peer (an IPv4 address, an IPv6 /64) at once,
	// counted from accept, before the TLS handshake; one more is closed at
	// once.
	DefaultConnsPerPeer = 16
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface: a socket that sends nothing is closed after it
	// (grpc.ConnectionTimeout; every handshake runs in a goroutine of its
	// own, never in the accept loop).
	HandshakeTimeout = 5 * time.Second
	// MaxConnectionIdle is how long a connection may stay without a call
	// before the server sends it GOAWAY (a client reconnects on its next call).
	MaxConnectionIdle = 2 * time.Minute
	// UnauthStreamLimit is how long a stream of a method that needs no
	// token (the health service, e.g. Health/Watch) stays open without
	// one on a daemon that authenticates by token only (TCP without
	// tls.client_ca); then it ends DEADLINE_EXCEEDED.
	UnauthStreamLimit = time.Minute
	// MaxConcurrentStreams is the most calls in flight on one connection.
	MaxConcurrentStreams = 32
	// MaxRequestBytes caps one request message, in bytes (plan_json is at
	// most 1 MiB, a ReadFile reply 1 MiB).
	MaxRequestBytes = 4 << 20
	// KeepaliveTime is how long a connection may be silent before the
	// server pings it; KeepaliveTimeout how long the ping may go
	// unanswered before the connection is closed (a vanished client).
	KeepaliveTime    = time.Minute
	KeepaliveTimeout = 20 * time.Second
	// MinPingInterval is the shortest interval at which a client may ping;
	// one pinging faster is disconnected (GOAWAY "too_many_pings").
	MinPingInterval = 10 * time.Second
)

// bounds are the connection bounds that tests shorten; zero fields mean
// the constants above.
type bounds struct {
	handshake    time.Duration // HandshakeTimeout
	idle         time.Duration // MaxConnectionIdle
	unauthStream time.Duration // UnauthStreamLimit
}

func (b bounds) withDefaults() bounds {
	if b.handshake <= 0 {
		b.handshake = HandshakeTimeout
	}
	if b.idle <= 0 {
		b.idle = MaxConnectionIdle
	}
	if b.unauthStream <= 0 {
		b.unauthStream = UnauthStreamLimit
	}
	return b
}

// limitOptions are the gRPC server options that bound what one client may
// hold: the handshake's time, streams per connection, request size, idle
// time and keepalive both ways.
func limitOptions(b bounds) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(b.handshake),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: b.idle, Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinPingInterval, PermitWithoutStream: true}),
	}
}
