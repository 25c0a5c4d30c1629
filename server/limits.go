package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Transport limits of the daemon's gRPC server (docs/api.md).
const (
	// MaxConnections is the most client connections served at once; more
	// wait in the listen backlog until one closes.
	MaxConnections = 64
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

// limitOptions are the gRPC server options that bound what one client may
// hold: streams per connection, request size, keepalive both ways.
func limitOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinPingInterval, PermitWithoutStream: true}),
	}
}
