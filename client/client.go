package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/local"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// SocketEnv names the environment variable that overrides DefaultSocket.
const SocketEnv = "THEMIS_SOCKET"

// MaxRecvBytes caps one response (a fingerprint with every leaf can be large).
const MaxRecvBytes = 64 << 20

// Options configures Dial.
type Options struct {
	// CAFile is a PEM bundle of CAs that verify the daemon's certificate
	// (TCP only). Empty: the system roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key for mTLS
	// (TCP only). Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked against the daemon's certificate
	// (default: the host part of the address).
	ServerName string
	// Token is sent as "authorization: Bearer <Token>" on every call.
	Token string
	// Insecure permits a connection without TLS. Only unix sockets may be
	// insecure; with TCP it is an error. (A unix socket never uses TLS, so
	// the flag changes nothing there.)
	Insecure bool
	// Lazy skips the health check Dial makes; the first call then reports a
	// connection problem instead.
	Lazy bool
}

// Client is a connection to a daemon. It is safe for concurrent use.
type Client struct {
	themisv1.ThemisClient
	// Health is the daemon's grpc health service.
	Health healthpb.HealthClient

	conn *grpc.ClientConn
}

// Dial connects to the daemon at addr ("unix:///path" or "host:port") and,
// unless opts.Lazy, checks that it answers its health service within ctx.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	target, unix, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	dopts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvBytes))}
	if unix {
		// Local credentials: plaintext on the wire, but grpc knows the
		// transport is a unix socket and lets the bearer token through.
		dopts = append(dopts, grpc.WithTransportCredentials(local.NewCredentials()))
	} else {
		if opts.Insecure {
			return nil, fmt.Errorf("dial %s: insecure transport is allowed only on a unix socket", addr)
		}
		cfg, err := tlsConfig(opts)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		dopts = append(dopts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	if opts.Token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer(opts.Token)))
	}
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := &Client{ThemisClient: themisv1.NewThemisClient(conn), Health: healthpb.NewHealthClient(conn), conn: conn}
	if !opts.Lazy {
		resp, err := c.Health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = fmt.Errorf("daemon reports %s", resp.GetStatus())
		}
		if err != nil {
			_ = conn.Close() // the check's error is the one to report
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
	}
	return c, nil
}

// Conn is the underlying connection, for other services on the daemon.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection. It is idempotent.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil && !strings.Contains(err.Error(), "already closed") {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// parseAddr returns the grpc target for addr and whether it is a unix socket.
func parseAddr(addr string) (target string, unix bool, err error) {
	switch {
	case addr == "":
		return "", false, errors.New("dial: empty address")
	case strings.HasPrefix(addr, "unix://"):
		p := strings.TrimPrefix(addr, "unix://")
		if !filepath.IsAbs(p) {
			return "", false, fmt.Errorf("dial %s: socket path must be absolute (unix:///path)", addr)
		}
		return "unix://" + p, true, nil
	case strings.HasPrefix(addr, "unix:"):
		return addr, true, nil
	case strings.HasPrefix(addr, "/"):
		return "unix://" + addr, true, nil
	case strings.HasPrefix(addr, "tcp://"):
		addr = strings.TrimPrefix(addr, "tcp://")
	case strings.Contains(addr, "://"):
		return "", false, fmt.Errorf("dial %s: unknown scheme (want unix:///path or host:port)", addr)
	}
	if _, port, ok := strings.Cut(addr, ":"); !ok || port == "" {
		return "", false, fmt.Errorf("dial %s: want host:port", addr)
	}
	return "dns:///" + addr, false, nil
}

func tlsConfig(opts Options) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: opts.ServerName}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca file %s: no PEM certificates", opts.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case opts.CertFile != "" && opts.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case opts.CertFile != "" || opts.KeyFile != "":
		return nil, errors.New("client certificate: set both CertFile and KeyFile")
	}
	return cfg, nil
}

// bearer is per-RPC credentials carrying a token. It requires transport
// security, which TLS and local (unix socket) credentials provide.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// DefaultSocket is the daemon's default socket path: $THEMIS_SOCKET if set
// (a path, or unix:///path);
// /run/themis/themisd.sock for root; $XDG_RUNTIME_DIR/themis/themisd.sock
// otherwise (or, without XDG_RUNTIME_DIR, themis-<uid>/themisd.sock under the
// temp dir).
func DefaultSocket() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return strings.TrimPrefix(s, "unix://")
	}
	if os.Geteuid() == 0 {
		return "/run/themis/themisd.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "themis", "themisd.sock")
	}
	return filepath.Join(os.TempDir(), "themis-"+strconv.Itoa(os.Geteuid()), "themisd.sock")
}

// DefaultAddr is DefaultSocket as an address for Dial ("unix:///...").
func DefaultAddr() string {
	return "unix://" + DefaultSocket()
}
