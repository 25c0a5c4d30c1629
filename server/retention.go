package server

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/session"
)

// pruneEvery is how often the daemon prunes the ledger after the prune at
// start.
const pruneEvery = time.Hour

// pruner is a domain whose ledger can be pruned (*session.Manager's Prune,
// through NewDomain).
type pruner interface {
	Prune(ctx context.Context, cutoff time.Time) (session.Pruned, error)
}

// retention prunes a domain's ledger at start and every pruneEvery.
type retention struct {
	p      pruner
	keep   time.Duration
	log    *zap.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// startRetention prunes what is older than keep once, now, then starts the
// loop. It returns nil when dom does not prune.
func startRetention(ctx context.Context, dom managedDomain, keep time.Duration, log *zap.Logger) *retention {
	p, ok := dom.(pruner)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &retention{p: p, keep: keep, log: log.Named("retention"), cancel: cancel, done: make(chan struct{})}
	r.prune(ctx)
	go r.loop(ctx)
	return r
}

func (r *retention) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.prune(ctx)
		}
	}
}

// prune prunes once; a failure is logged (the next round tries again).
func (r *retention) prune(ctx context.Context) {
	cutoff := time.Now().Add(-r.keep)
	n, err := r.p.Prune(ctx, cutoff)
	if err != nil {
		r.log.Warn("prune ledger", zap.Error(err))
		return
	}
	if n.Sessions > 0 || n.Events > 0 {
		r.log.Info("pruned ledger", zap.Int64("sessions", n.Sessions), zap.Int64("events", n.Events), zap.Time("before", cutoff))
	}
}

// stop ends the loop and waits for it; a nil retention is a no-op.
func (r *retention) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}
