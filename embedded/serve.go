package embedded

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/server"
)

// ServeOptions is what `themisctl daemon` takes: a TOML file as themisd's,
// or the few settings its flags give.
type ServeOptions struct {
	// ConfigFile is a TOML config file; when set, Listen and StateDir are
	// not used.
	ConfigFile string
	// Listen is unix:///path ("" the standard socket) or tcp://host:port.
	Listen string
	// StateDir is the ledger directory ("" the default).
	StateDir string
	// CacheDir is the guest image cache, used where the config names none.
	CacheDir string
	// Listening is told the address once the daemon serves (nil: nobody).
	Listening func(addr string)
}

// shutdownGrace bounds the shutdown after Serve's context ends.
const shutdownGrace = 60 * time.Second

// Serve runs a daemon in the foreground until ctx ends or the daemon
// does, then shuts it down.
func Serve(ctx context.Context, o ServeOptions, log *zap.Logger) error {
	cfg := server.Config{Listen: o.Listen, StateDir: o.StateDir}
	if o.ConfigFile != "" {
		c, err := server.LoadConfig(o.ConfigFile)
		if err != nil {
			return err
		}
		cfg = c
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = o.CacheDir
	}
	d, err := server.StartDaemon(ctx, cfg, log)
	if err != nil {
		return err
	}
	if o.Listening != nil {
		o.Listening(d.Addr())
	}
	select {
	case <-ctx.Done():
	case <-d.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	return d.Shutdown(sctx)
}
