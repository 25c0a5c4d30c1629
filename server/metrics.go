package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/themisfs/themis/session"
)

// metrics are the daemon's Prometheus metrics, on a registry of its own (no
// globals, so several daemons in one test binary do not collide). A nil
// *metrics counts nothing.
type metrics struct {
	reg            *prometheus.Registry
	ops            *prometheus.CounterVec
	restores       prometheus.Counter
	restoreSeconds prometheus.Histogram
	requests       *prometheus.CounterVec
	connsRefused   prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "themis_ops_total",
			Help: "Filesystem operations applied through Apply, by operation.",
		}, []string{"op"}),
		restores: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "themis_restores_total",
			Help: "Machine restores to a checkpoint.",
		}),
		restoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "themis_restore_seconds",
			Help:    "Time to restore a machine to a checkpoint.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "themis_grpc_requests_total",
			Help: "gRPC requests handled, by full method and status code.",
		}, []string{"method", "code"}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "themis_connections_refused_total",
			Help: "Connections closed at accept because their peer held limits.max_conns_per_peer already.",
		}),
	}
	m.reg.MustRegister(m.ops, m.restores, m.restoreSeconds, m.requests, m.connsRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchSessions registers themis_sessions_running, read from d at scrape
// time: from Stats() where d has it (*session.Manager does), else by
// listing; and, where d has Stats, the daemon budget's gauges.
func (m *metrics) watchSessions(d Domain, log *zap.Logger) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "themis_sessions_running",
		Help: "Sessions whose guest is running.",
	}, func() float64 {
		// Optional ability: the session manager counts running sessions itself.
		if st, ok := d.(interface{ Stats() session.Stats }); ok {
			return float64(st.Stats().Running)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		infos, err := d.List(ctx, false)
		if err != nil {
			log.Debug("metrics: list sessions", zap.Error(err))
			return 0
		}
		n := 0
		for _, in := range infos {
			if in.State == session.StateRunning {
				n++
			}
		}
		return float64(n)
	}))
	if st, ok := d.(interface{ Stats() session.Stats }); ok {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "themis_budget_used_bytes",
			Help: "Host bytes the sessions keep beyond guest RAM (overlays, kept content, checkpoint RAM), against limits.daemon_budget_mib.",
		}, func() float64 { return float64(st.Stats().BudgetUsed) }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "themis_budget_limit_bytes",
			Help: "The daemon budget (limits.daemon_budget_mib) in bytes.",
		}, func() float64 { return float64(st.Stats().BudgetLimit) }))
	}
}

func (m *metrics) op(name string) {
	if m != nil {
		m.ops.WithLabelValues(name).Inc()
	}
}

// restore is the session manager's OnRestore hook.
func (m *metrics) restore(d time.Duration) {
	if m != nil {
		m.restores.Inc()
		m.restoreSeconds.Observe(d.Seconds())
	}
}

// connRefused counts a connection closed for its peer's cap.
func (m *metrics) connRefused() {
	if m != nil {
		m.connsRefused.Inc()
	}
}

func (m *metrics) request(method string, err error) {
	if m != nil {
		m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	}
}

// observe counts every request by method and code and logs it at debug level.
// It is the outermost interceptor, so requests refused by validation are
// counted too; those the token check refuses in the transport tap never
// reach it.
type observe struct {
	m   *metrics
	log *zap.Logger
}

func (o observe) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	o.done(info.FullMethod, start, err)
	return resp, err
}

func (o observe) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	o.done(info.FullMethod, start, err)
	return err
}

func (o observe) done(method string, start time.Time, err error) {
	o.m.request(method, err)
	if ce := o.log.Check(zap.DebugLevel, "rpc"); ce != nil {
		ce.Write(zap.String("method", method), zap.Stringer("code", status.Code(err)),
			zap.Duration("took", time.Since(start)), zap.Error(err))
	}
}
