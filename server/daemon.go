package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/local"

	"github.com/themisfs/themis/dashboard"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/live"
	"github.com/themisfs/themis/session"
)

// Daemon is a running Themis daemon: a session manager served over gRPC,
// and optionally a Prometheus endpoint.
type Daemon struct {
	log  *zap.Logger
	addr string
	srv  *Server
	grpc *grpc.Server
	dom  managedDomain
	sock *unixSocket // nil for TCP

	metrics *endpoint            // /metrics; nil when off
	ui      *endpoint            // the dashboard's server; nil when off
	dash    *dashboard.Dashboard // its handler; nil when off
	live    *live.Hub            // the runs' progress the dashboard streams

	done     chan struct{} // closed when the gRPC server stops serving
	serveErr error         // set before done is closed

	// hardStop bounds each wait for cut-off calls in Shutdown (0: defaultHardStop).
	hardStop time.Duration
	// retention is the ledger pruning loop (nil when the domain prunes nothing).
	retention *retention

	shutdownOnce sync.Once
	shutdownErr  error
}

// openFunc opens the domain the daemon serves; onRestore feeds metrics.
type openFunc func(ctx context.Context, cfg Config, onRestore func(time.Duration), log *zap.Logger) (managedDomain, error)

func openManager(ctx context.Context, cfg Config, onRestore func(time.Duration), log *zap.Logger) (managedDomain, error) {
	sweepLeftovers(cfg.CacheDir, log)
	m, err := session.Open(ctx, session.Config{
		MakeBase:          baseimage.Maker(int64(cfg.Limits.MaxBaseCacheMiB) << 20),
		StateDir:          cfg.StateDir,
		CacheDir:          cfg.CacheDir,
		Guest:             guest.Options{CacheDir: cfg.CacheDir, Log: log.Named("guest")},
		MaxSessions:       cfg.Limits.MaxSessions,
		MaxMemoryMiB:      cfg.Limits.MaxMemoryMiB,
		ManualCheckpoints: cfg.Limits.ManualCheckpoints,
		AutoCheckpoints:   cfg.Limits.AutoCheckpoints,
		CallTimeout:       time.Duration(cfg.Limits.CallTimeoutS) * time.Second,
		MaxRunDuration:    time.Duration(cfg.Limits.MaxRunSeconds) * time.Second,
		SessionBudget:     int64(cfg.Limits.SessionBudgetMiB) << 20,
		DaemonBudget:      int64(cfg.Limits.DaemonBudgetMiB) << 20,
		OnRestore:         onRestore,
		Log:               log.Named("session"),
	})
	if err != nil {
		return nil, fmt.Errorf("open sessions: %w", err)
	}
	return NewDomain(m), nil
}

// StartDaemonWith is StartDaemon serving an already open domain
// (NewDomain of a *session.Manager), for embedding and benchmarks. Shutdown closes it.
func StartDaemonWith(ctx context.Context, cfg Config, dom ManagedDomain, log *zap.Logger) (*Daemon, error) {
	return startDaemon(ctx, cfg, log, func(context.Context, Config, func(time.Duration), *zap.Logger) (managedDomain, error) {
		return dom, nil
	})
}

// StartDaemon checks cfg, listens, opens the session manager and starts
// serving. It returns once the daemon accepts connections; Shutdown stops
// it. A nil log discards.
func StartDaemon(ctx context.Context, cfg Config, log *zap.Logger) (*Daemon, error) {
	return startDaemon(ctx, cfg, log, openManager)
}

func startDaemon(ctx context.Context, cfg Config, log *zap.Logger, open openFunc) (_ *Daemon, err error) {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("themisd")
	cfg = cfg.withDefaults()
	la, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}

	// Everything that can fail on bad files comes before anything is bound.
	creds, err := transportCredentials(cfg, la, log)
	if err != nil {
		return nil, err
	}
	mtc, err := httpTLS(cfg, "metrics_listen", cfg.MetricsListen)
	if err != nil {
		return nil, err
	}
	utc, err := httpTLS(cfg, "ui.listen", cfg.UI.Listen)
	if err != nil {
		return nil, err
	}
	var auth *tokenAuth
	if cfg.TokenFile != "" {
		if auth, err = readToken(cfg.TokenFile); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}

	d := &Daemon{log: log, done: make(chan struct{})}
	// cleanup undoes what was set up if a later step fails.
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	lis, closeLis, err := d.listen(la)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, closeLis)

	m := newMetrics()
	mlis, err := listenHTTP("metrics_listen", cfg.MetricsListen, &cleanup)
	if err != nil {
		return nil, err
	}
	ulis, err := listenHTTP("ui.listen", cfg.UI.Listen, &cleanup)
	if err != nil {
		return nil, err
	}

	if d.dom, err = open(ctx, cfg, m.restore, log); err != nil {
		return nil, err
	}
	m.watchSessions(d.dom, log)
	d.retention = startRetention(ctx, d.dom, time.Duration(cfg.Ledger.RetentionDays)*24*time.Hour, log)

	d.srv = New(d.dom, log)
	d.srv.metrics = m
	hub := live.NewHub()
	d.srv.live, d.live = hub, hub
	if cfg.Limits.StreamStallS > 0 {
		d.srv.streamWait = time.Duration(cfg.Limits.StreamStallS) * time.Second
	}
	if cfg.Limits.StreamBuffer > 0 {
		d.srv.streamBuffer = cfg.Limits.StreamBuffer
	}
	var unauth *tokenAuth // streams without the token are bounded on a token-only TCP daemon
	if la.network == "tcp" && cfg.TLS.ClientCA == "" {
		unauth = auth
	}
	d.grpc = newGRPCServer(creds, cfg.bounds, m, auth, unauth, log)
	Register(d.grpc, d.srv)
	d.serve(newPeerLimitListener(lis, MaxConnections, cfg.Limits.MaxConnsPerPeer, m.connRefused, log))
	if mlis != nil {
		d.metrics = startEndpoint("metrics", mlis, mtc, auth, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}), "/metrics", log)
	}
	if ulis != nil {
		d.dash = dashboard.Handler(dashStore{d.dom}, hub, log.Named("dashboard"))
		d.ui = startEndpoint("dashboard", ulis, utc, auth, d.dash, "/", log)
	}
	log.Info("serving", zap.String("listen", d.addr), zap.String("metrics", d.MetricsAddr()), zap.String("ui", d.UIAddr()),
		zap.Bool("token", auth != nil), zap.Bool("mtls", la.network == "tcp" && cfg.TLS.ClientCA != ""))
	return d, nil
}

// transportCredentials are the gRPC credentials for la: TLS (cfg.TLS) on
// TCP, local credentials on a unix socket, where cfg.TLS is ignored with a
// warning.
func transportCredentials(cfg Config, la listenAddr, log *zap.Logger) (credentials.TransportCredentials, error) {
	if la.network == "tcp" {
		tc, err := serverTLS(cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		return credentials.NewTLS(tc), nil
	}
	if cfg.TLS.Cert != "" && (cfg.MetricsListen == "" || metricsOnLoopback(cfg.MetricsListen)) {
		log.Warn("tls is ignored on a unix socket", zap.String("listen", cfg.Listen))
	}
	return local.NewCredentials(), nil
}

// httpTLS is an HTTP endpoint's TLS configuration (cfg.TLS, mTLS with a
// client CA), or nil where it is plain HTTP: off, or on loopback.
func httpTLS(cfg Config, key, addr string) (*tls.Config, error) {
	if addr == "" || metricsOnLoopback(addr) {
		return nil, nil
	}
	tc, err := serverTLS(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", key, err)
	}
	return tc, nil
}

// listen binds the gRPC listener for la and sets d.addr (and d.sock on a
// unix socket). closeListener closes it again, removing the socket.
func (d *Daemon) listen(la listenAddr) (lis net.Listener, closeListener func(), err error) {
	switch la.network {
	case "unix":
		if lis, d.sock, err = listenUnix(la.address); err != nil {
			return nil, nil, err
		}
		d.addr = "unix://" + la.address
		return lis, func() { _ = lis.Close(); _ = d.sock.remove() }, nil
	default:
		if lis, err = net.Listen("tcp", la.address); err != nil {
			return nil, nil, fmt.Errorf("listen: %w", err)
		}
		d.addr = "tcp://" + lis.Addr().String()
		return lis, func() { _ = lis.Close() }, nil
	}
}

// newGRPCServer is the daemon's gRPC server: creds, the transport limits
// (limitOptions), the token check in the transport tap when auth is set,
// then the metrics and panic-recovery interceptors and, when unauth is
// set, the bound on its streams without the token (tokenAuth.boundUnauth).
func newGRPCServer(creds credentials.TransportCredentials, b bounds, m *metrics, auth, unauth *tokenAuth, log *zap.Logger) *grpc.Server {
	obs := observe{m: m, log: log}
	rec := recoverer{log: log}
	streams := []grpc.StreamServerInterceptor{obs.stream, rec.stream}
	if unauth != nil {
		streams = append(streams, unauth.boundUnauth(b.unauthStream))
	}
	opts := append(limitOptions(b),
		grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(obs.unary, rec.unary),
		grpc.ChainStreamInterceptor(streams...),
	)
	if auth != nil {
		opts = append(opts, grpc.InTapHandle(auth.tap))
	}
	return grpc.NewServer(opts...)
}

// serve starts serving gRPC on lis in its own goroutine; d.done closes
// when it stops.
func (d *Daemon) serve(lis net.Listener) {
	go func() {
		d.serveErr = d.grpc.Serve(lis)
		close(d.done)
	}()
}

// Addr is the address the daemon serves on: "unix:///path" or
// "tcp://host:port" (with the real port when the config asked for port 0).
func (d *Daemon) Addr() string { return d.addr }

// MetricsAddr is the Prometheus endpoint's host:port, or "" when off.
func (d *Daemon) MetricsAddr() string { return d.metrics.address() }

// UIAddr is the dashboard's host:port ("" when off).
func (d *Daemon) UIAddr() string { return d.ui.address() }

// Done is closed when the daemon stops serving, whether by Shutdown or
// because its listener failed; Err then says why.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is the error that stopped serving, nil after a Shutdown. Only valid
// once Done is closed.
func (d *Daemon) Err() error { return d.serveErr }

// Shutdown stops the daemon: health turns NOT_SERVING, the listener closes,
// in-flight calls may finish until ctx ends (the drain). Then they are cut
// off: their contexts are cancelled, and after a bounded wait every
// session's guest is stopped (which ends a call blocked on its machine),
// with another bounded wait for the calls to return. The domain (and so the
// ledger) is closed only once no call is left running; if one still is,
// Shutdown leaves the ledger open (SQLite's WAL keeps it consistent when
// the process exits) and says so. The unix socket is removed. It is
// idempotent; later calls return the first call's result.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.shutdownOnce.Do(func() { d.shutdownErr = d.shutdown(ctx) })
	return d.shutdownErr
}

// defaultHardStop bounds each wait for cut-off calls to return (see Shutdown).
const defaultHardStop = 10 * time.Second

// sessionStopper is a domain that can stop its sessions' guests before it
// closes (*session.Manager's StopSessions, through NewDomain).
type sessionStopper interface {
	StopSessions() error
}

func (d *Daemon) shutdown(ctx context.Context) error {
	d.srv.health.Shutdown()
	d.retention.stop()
	errs := []error{d.stopHandlers(ctx)}
	d.live.Close() // ends the dashboard's event streams
	errs = append(errs, d.metrics.shutdown(ctx), d.ui.shutdown(ctx))
	if d.sock != nil {
		if err := d.sock.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	d.log.Info("stopped")
	return nil
}

// stopHandlers drains the gRPC server until ctx ends, then cuts the calls
// off, stops the sessions and closes the domain once every call has
// returned (see Shutdown).
func (d *Daemon) stopHandlers(ctx context.Context) error {
	hard := d.hardStop
	if hard <= 0 {
		hard = defaultHardStop
	}
	// GracefulStop returns once every handler has, also after a Stop.
	handlersDone := make(chan struct{})
	go func() {
		d.grpc.GracefulStop()
		close(handlersDone)
	}()
	select {
	case <-handlersDone:
	case <-ctx.Done():
		d.log.Warn("graceful stop timed out; cancelling in-flight calls", zap.Error(ctx.Err()))
		d.grpc.Stop()
		if !waitFor(handlersDone, hard) {
			d.log.Warn("calls still running after cancellation; stopping the sessions under them", zap.Duration("waited", hard))
		}
	}
	d.closeDashboard(hard)
	var errs []error
	if st, ok := d.dom.(sessionStopper); ok {
		if err := st.StopSessions(); err != nil {
			errs = append(errs, fmt.Errorf("stop sessions: %w", err))
		}
	}
	if !waitFor(handlersDone, hard) {
		d.log.Error("calls still running after their sessions stopped; leaving the ledger open")
		return errors.Join(append(errs, errors.New("calls still running after the hard stop; the ledger was left open"))...)
	}
	<-d.done
	if err := d.dom.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close sessions: %w", err))
	}
	return errors.Join(errs...)
}

// closeDashboard cancels the dashboard's downloads under way (exports,
// each in a session of its own) and waits up to hard for them to return,
// so that they end before their sessions are stopped and the domain
// closes.
func (d *Daemon) closeDashboard(hard time.Duration) {
	if d.dash == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		d.dash.Close()
		close(done)
	}()
	if !waitFor(done, hard) {
		d.log.Warn("dashboard downloads still running after their cancellation", zap.Duration("waited", hard))
	}
}

// waitFor waits up to limit for ch to close and says whether it did.
func waitFor(ch <-chan struct{}, limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}
